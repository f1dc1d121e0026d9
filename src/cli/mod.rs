//! The command line: subcommands, their flags, and the `plan` command.
//!
//! Flags are spelled as in the cloud-controller-manager, and accepted in both forms it
//! accepts (`--flag value` and `--flag=value`; booleans as `--flag`, `--flag=true` or
//! `--flag=false`), so that operators can copy their manifests. Invalid input exits
//! with status 2 and one line naming the flag or file and the fix.

use std::fmt::Write as _;
use std::io::Read;

use argh::FromArgs;
use serde::Serialize;

use crate::config::parse_cluster_cidrs;
use crate::model::{Node, NodeAddress, NodeList, Route};
use crate::plan::{self, Plan};

pub mod run;

pub use run::RunArgs;

/// Exit status for invalid configuration or input.
pub const EXIT_USAGE: i32 = 2;

#[derive(FromArgs, Debug)]
/// route-controller keeps a cloud's route table in step with the cluster's nodes: every
/// node's pod CIDRs are routed to that node.
pub struct Cli {
    #[argh(subcommand)]
    pub command: Command,
}

#[derive(FromArgs, Debug)]
#[argh(subcommand)]
// Parsed once at start; boxing would need argh support for boxed subcommands.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    Run(RunArgs),
    Plan(PlanArgs),
    Simulate(SimulateArgs),
    Manifests(ManifestsArgs),
}

#[derive(FromArgs, Debug)]
/// Print ready-to-apply YAML: a ServiceAccount with least-privilege RBAC, a Deployment
/// with leader election, probes, resources and a locked-down security context, and
/// Secret references for the provider's credentials.
#[argh(subcommand, name = "manifests")]
pub struct ManifestsArgs {
    /// the cloud: hcloud, aws or fake (default: hcloud)
    #[argh(option, default = "String::from(\"hcloud\")")]
    pub cloud_provider: String,
    /// the pod network, as for `run` (required)
    #[argh(option)]
    pub cluster_cidr: Option<String>,
    /// the cluster name (default: kubernetes)
    #[argh(option, default = "String::from(\"kubernetes\")")]
    pub cluster_name: String,
    /// namespace of the Deployment, its ServiceAccount and the lease (default: kube-system)
    #[argh(option, default = "String::from(\"kube-system\")")]
    pub namespace: String,
    /// the container image (default: route-controller:<version>, an image you build
    /// and push yourself; see the README)
    #[argh(option)]
    pub image: Option<String>,
    /// the leader election Lease's name (default: route-controller)
    #[argh(option, default = "String::from(\"route-controller\")")]
    pub leader_elect_resource_name: String,
    /// watch-based reconciliation (true) or polling every 10 s (false) (default: true)
    #[argh(option, default = "true")]
    pub watch_based: bool,
    /// the secure port (HTTPS) of /metrics, /healthz and /readyz on the host network;
    /// not the CCM's 10258, which the CCM beside it holds (default: 10270)
    #[argh(option, default = "10270")]
    pub metrics_port: u16,
    /// replicas; one leads, the others stand by (default: 2)
    #[argh(option, default = "2")]
    pub replicas: u32,
    /// also a Service and a prometheus-operator ServiceMonitor for the secure port, and
    /// a Grafana dashboard ConfigMap for the Grafana sidecar (default: false)
    #[argh(option, default = "false")]
    pub monitoring: bool,
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
    };
    options.validate().map_err(UsageError)?;
    Ok(crate::manifests::render(&options))
}

#[derive(FromArgs, Debug)]
/// Simulate the controller in virtual time against an in-memory cloud, in each mode side
/// by side (poll, upstream-style watch, ours), and print the cloud calls and latencies.
/// The real controller code runs; only the cluster and the cloud are simulated. A 24-hour
/// scenario takes seconds.
#[argh(subcommand, name = "simulate")]
pub struct SimulateArgs {
    /// scenario: steady, rolling-upgrade, scale-out, flaky-cloud, address-churn, or all
    /// (default: all)
    #[argh(option, default = "String::from(\"all\")")]
    pub scenario: String,
    /// number of nodes (default: the scenario's, 1000 or 300)
    #[argh(option)]
    pub nodes: Option<usize>,
    /// simulated time, in Go syntax such as 24h or 90m (default: the scenario's, 24h or 1h)
    #[argh(option)]
    pub duration: Option<String>,
    /// random seed; one seed always gives the same numbers (default: 1)
    #[argh(option, default = "1")]
    pub seed: u64,
    /// time each cloud call takes (default: 100ms)
    #[argh(option, default = "String::from(\"100ms\")")]
    pub latency: String,
    /// output format: table (default) or json
    #[argh(option, default = "String::from(\"table\")")]
    pub output: String,
    /// write an SVG chart of cloud calls over time to FILE (with several scenarios, the
    /// scenario name is added before the extension)
    #[argh(option)]
    pub chart: Option<String>,
}

#[derive(FromArgs, Debug)]
/// Show what one reconcile pass would do, changing nothing. Nodes come from a file
/// (`kubectl get nodes -o json` output, "-" for stdin) or, without --nodes, from the
/// cluster; routes from a file ({"routes":[{"name","targetNode","destinationCIDR",
/// "blackhole","targetNodeAddresses","enableNodeAddresses"}]}) or, without --routes,
/// from the cloud named by --cloud-provider.
#[argh(subcommand, name = "plan")]
pub struct PlanArgs {
    /// the nodes: a NodeList as `kubectl get nodes -o json` prints it, or "-" for
    /// stdin (default: list them from the cluster)
    #[argh(option)]
    pub nodes: Option<String>,
    /// the cloud routes: {"routes":[...]} (default: list them from --cloud-provider)
    #[argh(option)]
    pub routes: Option<String>,
    /// the pod network: one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma;
    /// routes outside it are never deleted
    #[argh(option)]
    pub cluster_cidr: String,
    /// the cluster name passed to the cloud (default: kubernetes)
    #[argh(option, default = "String::from(\"kubernetes\")")]
    pub cluster_name: String,
    /// output format: table (default) or json
    #[argh(option, default = "String::from(\"table\")")]
    pub output: String,
    /// without --nodes: the kubeconfig to read the cluster with (default: $KUBECONFIG,
    /// ~/.kube/config, in-cluster)
    #[argh(option)]
    pub kubeconfig: Option<String>,
    /// without --nodes: the API server URL, overriding the kubeconfig's
    #[argh(option)]
    pub master: Option<String>,
    /// without --routes: the cloud to list routes from: hcloud, aws or fake
    #[argh(option)]
    pub cloud_provider: Option<String>,
    /// without --routes: the provider settings file (see `run --help`)
    #[argh(option)]
    pub cloud_config: Option<String>,
}

/// Flags of `run` that are booleans: `--flag` alone means true.
const BOOL_FLAGS: &[&str] = &[
    "--leader-elect",
    "--configure-cloud-routes",
    "--watch-based",
    "--monitoring",
];

/// Flags of the cloud-controller-manager that do not apply here. They are accepted, so
/// that flags copied from a CCM manifest work, and ignored with a warning. The second
/// field says whether the flag is a boolean (it may stand alone).
const IGNORED_CCM_FLAGS: &[(&str, bool)] = &[
    ("--allocate-node-cidrs", true),
    ("--authentication-skip-lookup", true),
    ("--cidr-allocator-type", false),
    ("--concurrent-service-syncs", false),
    ("--contention-profiling", true),
    ("--controllers", false),
    ("--enable-leader-migration", true),
    ("--external-cloud-volume-plugin", false),
    ("--leader-migration-config", false),
    ("--node-monitor-period", false),
    ("--node-status-update-frequency", false),
    ("--node-sync-period", false),
    ("--profiling", true),
    ("--requestheader-client-ca-file", false),
    ("--use-service-account-credentials", true),
    ("--webhook-secure-port", false),
];

/// Arguments as argh reads them, plus warnings about flags that were ignored.
#[derive(Debug, PartialEq, Eq)]
pub struct Normalized {
    pub args: Vec<String>,
    pub warnings: Vec<String>,
}

/// Rewrites the spellings of Go's pflag into argh's: `--flag=value` becomes `--flag
/// value`, and a boolean `--flag` given alone becomes `--flag true`. For `run`, the
/// cloud-controller-manager's flags that do not apply are dropped with a warning.
pub fn normalize_args(args: &[String]) -> Normalized {
    let is_run = args.first().is_some_and(|a| a == "run");
    let mut out = Vec::with_capacity(args.len() + 4);
    let mut warnings = Vec::new();
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        if arg == "--" {
            out.push(arg.clone());
            out.extend(iter.by_ref().cloned());
            break;
        }
        let (name, value) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (arg.as_str(), None),
        };
        if is_run && let Some((_, boolean)) = IGNORED_CCM_FLAGS.iter().find(|(f, _)| *f == name) {
            let takes_next =
                value.is_none() && !boolean && iter.peek().is_some_and(|n| !n.starts_with("--"));
            if takes_next {
                iter.next();
            }
            warnings.push(format!("{name} is a cloud-controller-manager flag that route-controller does not use; ignored"));
            continue;
        }
        out.push(name.to_string());
        match value {
            Some(v) => out.push(v.to_string()),
            None if BOOL_FLAGS.contains(&name)
                && iter.peek().is_none_or(|n| n.starts_with("--")) =>
            {
                out.push("true".to_string());
            }
            None => {}
        }
    }
    Normalized {
        args: out,
        warnings,
    }
}

/// Parses the process arguments; on `--help` prints help and exits 0, on bad flags
/// prints one line and exits 2. Returns warnings about ignored flags, for the log.
pub fn parse(args: &[String]) -> (Cli, Vec<String>) {
    let normalized = normalize_args(args.get(1..).unwrap_or(&[]));
    let strs: Vec<&str> = normalized.args.iter().map(String::as_str).collect();
    match Cli::from_args(&["route-controller"], &strs) {
        Ok(cli) => (cli, normalized.warnings),
        Err(early) => match early.status {
            Ok(()) => {
                println!("{}", early.output);
                std::process::exit(0);
            }
            Err(()) => {
                let line = early
                    .output
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                eprintln!("error: {line} (see --help)");
                std::process::exit(EXIT_USAGE);
            }
        },
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
    let scenarios: Vec<Scenario> = if args.scenario == "all" {
        Scenario::ALL.to_vec()
    } else {
        vec![Scenario::parse(&args.scenario).ok_or_else(|| {
            UsageError(format!(
                "--scenario: {:?} is not a scenario; use one of steady, rolling-upgrade, scale-out, flaky-cloud, \
                 address-churn, all",
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
    if duration.is_some_and(|d| d.is_zero()) {
        return Err(UsageError("--duration: must be more than 0".into()));
    }
    let latency =
        crate::duration::parse(&args.latency).map_err(|e| UsageError(format!("--latency: {e}")))?;
    if args.nodes == Some(0) || args.nodes.is_some_and(|n| n > 60_000) {
        return Err(UsageError("--nodes: give between 1 and 60000 nodes".into()));
    }
    let mut reports = Vec::new();
    for scenario in &scenarios {
        let options = SimOptions {
            scenario: *scenario,
            nodes: args.nodes,
            duration,
            seed: args.seed,
            latency,
        };
        // On a terminal, one line that counts up; in a log, a line per quarter.
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let step = if tty { 1 } else { 25 };
        let mut shown = None;
        let mut progress = |f: f64| {
            let pct = (f * 100.0) as u32 / step * step;
            if shown == Some(pct) {
                return;
            }
            shown = Some(pct);
            if tty {
                eprint!("\rsimulating {:<16} {pct:>3} %", scenario.name());
            } else {
                eprintln!("simulating {}: {pct} %", scenario.name());
            }
        };
        let report = sim::run(&options, &mut progress);
        if tty {
            eprint!("\r{:<40}\r", "");
        }
        if let Some(path) = &args.chart {
            let path = if scenarios.len() > 1 {
                chart_path(path, scenario.name())
            } else {
                path.clone()
            };
            std::fs::write(&path, sim::chart(&report))
                .map_err(|e| UsageError(format!("--chart {path}: cannot write: {e}")))?;
            eprintln!("wrote {path}");
        }
        reports.push(report);
    }
    Ok(match args.output.as_str() {
        "json" if reports.len() == 1 => {
            serde_json::to_string_pretty(&reports[0]).unwrap_or_default() + "\n"
        }
        "json" => serde_json::to_string_pretty(&reports).unwrap_or_default() + "\n",
        _ => reports
            .iter()
            .map(sim::table)
            .collect::<Vec<_>>()
            .join("\n"),
    })
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
    if args.routes.is_none() && args.cloud_provider.is_none() {
        return Err(UsageError(
            "--routes or --cloud-provider is required: read routes from a file or from the cloud"
                .into(),
        ));
    }
    let nodes = match &args.nodes {
        Some(path) => read_nodes(path)?,
        None => live_nodes(args)?,
    };
    let routes = match (&args.routes, &args.cloud_provider) {
        (Some(path), _) => read_routes(path)?,
        (None, Some(name)) => {
            let cloud = run::provider(
                name,
                args.cloud_config
                    .as_ref()
                    .map(std::path::PathBuf::from)
                    .as_ref(),
                &cluster_cidrs,
                None,
            )?;
            let directory = crate::cloud::NodeDirectory::new(
                nodes
                    .iter()
                    .map(|n| (n.name.as_str(), n.provider_id.as_deref())),
            );
            cloud
                .list_routes(&args.cluster_name, &directory)
                .map_err(|e| {
                    UsageError(format!(
                        "--cloud-provider {name}: listing routes failed: {e}"
                    ))
                })?
        }
        (None, None) => unreachable!("checked above"),
    };
    let plan = plan::plan(&nodes, &routes, &cluster_cidrs);
    for p in &plan.problems {
        eprintln!("warning: {p}");
    }
    Ok(match args.output.as_str() {
        "json" => plan_json(&plan, &nodes),
        _ => plan_table(&plan, &nodes),
    })
}

/// Lists the nodes of the cluster that `--kubeconfig`/`--master` (or the usual
/// resolution) names.
fn live_nodes(args: &PlanArgs) -> Result<Vec<Node>, UsageError> {
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
    crate::kube::list_nodes(&client, &WatchConfig::default())
        .map_err(|e| UsageError(format!("listing nodes from {}: {e}", kube.server)))
}

fn read_input(path: &str, flag: &str) -> Result<String, UsageError> {
    let mut text = String::new();
    let result = if path == "-" {
        std::io::stdin().read_to_string(&mut text).map(|_| ())
    } else {
        std::fs::read_to_string(path).map(|t| text = t)
    };
    result.map_err(|e| UsageError(format!("{flag} {path}: cannot read: {e}")))?;
    Ok(text)
}

/// Reads a NodeList (or a single Node) from `kubectl get nodes -o json`.
pub fn read_nodes(path: &str) -> Result<Vec<Node>, UsageError> {
    let text = read_input(path, "--nodes")?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| UsageError(format!("--nodes {path}: not valid JSON: {e}")))?;
    let bad = |e: serde_json::Error| UsageError(format!("--nodes {path}: not a node list: {e}"));
    match value.get("kind").and_then(|k| k.as_str()) {
        Some("Node") => Ok(vec![serde_json::from_value(value).map_err(bad)?]),
        _ if value.get("items").is_some_and(|i| i.is_array()) => {
            Ok(serde_json::from_value::<NodeList>(value)
                .map_err(bad)?
                .items)
        }
        _ => Err(UsageError(format!(
            "--nodes {path}: expected a NodeList with \"items\" (kubectl get nodes -o json)"
        ))),
    }
}

pub fn read_routes(path: &str) -> Result<Vec<Route>, UsageError> {
    let text = read_input(path, "--routes")?;
    let file: RouteFile = serde_json::from_str(&text).map_err(|e| {
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
    problems: Vec<String>,
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
/// succeeded.
pub fn plan_json(plan: &Plan, nodes: &[Node]) -> String {
    let requests = plan::requests(plan, nodes);
    let json = JsonPlan {
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
                node: &n.node,
                status: c.status.into_owned(),
                reason: c.reason.into_owned(),
                message: c.message.into_owned(),
            })
            .collect(),
        problems: plan.problems.iter().map(ToString::to_string).collect(),
    };
    let mut text = serde_json::to_string_pretty(&json).unwrap_or_default();
    text.push('\n');
    text
}

/// The plan for people.
pub fn plan_table(plan: &Plan, nodes: &[Node]) -> String {
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
    let conditions = plan::conditions_on_success(plan);
    for (n, c) in &conditions {
        let _ = writeln!(
            out,
            "CONDITION  {:<18} NetworkUnavailable={} ({})",
            n.node, c.status, c.reason
        );
    }
    let _ = writeln!(
        out,
        "{} to delete, {} to create, {} kept, {} condition writes{}",
        plan.deletes.len(),
        plan.creates.len(),
        plan.kept,
        conditions.len(),
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

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn equals_form_is_split_into_flag_and_value() {
        assert_eq!(
            normalize_args(&s(&[
                "plan",
                "--cluster-cidr=10.0.0.0/8",
                "--nodes",
                "n.json"
            ]))
            .args,
            s(&["plan", "--cluster-cidr", "10.0.0.0/8", "--nodes", "n.json"])
        );
    }

    #[test]
    fn values_after_double_dash_are_left_alone() {
        assert_eq!(
            normalize_args(&s(&["--", "--a=b"])).args,
            s(&["--", "--a=b"])
        );
    }

    #[test]
    fn booleans_take_pflag_spellings() {
        let n = normalize_args(&s(&[
            "run",
            "--leader-elect",
            "--configure-cloud-routes=false",
            "--leader-elect=false",
        ]));
        assert_eq!(
            n.args,
            s(&[
                "run",
                "--leader-elect",
                "true",
                "--configure-cloud-routes",
                "false",
                "--leader-elect",
                "false"
            ])
        );
    }

    #[test]
    fn ccm_flags_that_do_not_apply_are_dropped_with_a_warning() {
        let n = normalize_args(&s(&[
            "run",
            "--allocate-node-cidrs",
            "--controllers=*,-cloud-node",
            "--webhook-secure-port",
            "10260",
            "--cluster-cidr=10.0.0.0/8",
        ]));
        assert_eq!(n.args, s(&["run", "--cluster-cidr", "10.0.0.0/8"]));
        assert_eq!(n.warnings.len(), 3);
        assert!(n.warnings[1].starts_with("--controllers is a cloud-controller-manager flag"));
    }
}
