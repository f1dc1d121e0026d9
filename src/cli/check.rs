//! `route-controller check-config`: `run`'s flags and cloud config read exactly as
//! `run` reads them, and what was understood printed, with no cluster and no cloud.
//!
//! It is the step before `kubectl apply`: it exits 2 on everything `run` would refuse
//! at start, and prints the provider, what it will manage, where its identity, trust
//! and proxy come from, its limits and budgets, and every warning `run` would log.
//! Nothing is asked of the cluster or the cloud unless `--probe` is given, which then
//! makes read-only calls only (the provider's start-up reads and one list of routes;
//! the API server's discovery of the Lease API). No secret is printed.

use std::fmt::Write as _;

use super::flags::{Flag, Kind, Parsed, Spec};
use super::{RunArgs, UsageError, cloud, run};

/// `check-config`'s command line: `run`'s, and `--probe`.
pub static SPEC: Spec = Spec {
    name: "check-config",
    about: "Read run's flags and cloud config exactly as run reads them and print what was \
            understood: the provider, the tables, routers or network it will manage, where its \
            identity, TLS trust and proxy come from, its limits and budgets, and every warning \
            run would log. No secret is printed. It needs no cluster and makes no request \
            unless --probe is given. Exit status: 0 when run would start with these settings, 2 \
            when it would refuse them (the line says why), 1 when --probe found the cloud or the \
            API server unreachable.",
    env: run::ENV,
    groups: &[
        ("Flags", &[PROBE]),
        ("run's flags, read as run reads them", run::FLAGS),
        (
            "The cloud-controller-manager's other flags (accepted, as by run)",
            super::ccm::FLAGS,
        ),
        (
            "Flags of other controllers that CCM templates pass (accepted, as by run)",
            super::ccm::EXTRA_FLAGS,
        ),
    ],
};

const PROBE: Flag = Flag::new(
    "probe",
    Kind::Bool,
    "also check reachability and permissions with read-only calls: the cloud provider's \
     start-up reads and one list of its routes, and the API server's Lease API (none of \
     them changes anything)",
)
.default("false");

/// `check-config`'s flags, parsed.
#[derive(Debug)]
pub struct CheckArgs {
    run: RunArgs,
    probe: bool,
}

impl CheckArgs {
    pub(super) fn from_parsed(parsed: Parsed) -> CheckArgs {
        let probe = parsed.bool("probe");
        CheckArgs {
            run: RunArgs::from_parsed(parsed),
            probe,
        }
    }
}

/// What `check-config` found: its report, and the exit status.
#[derive(Debug)]
pub struct Outcome {
    /// The report, for stdout.
    pub text: String,
    /// 0: `run` would start; 1: `--probe` could not reach the cloud or the API server.
    pub status: i32,
}

/// Runs `check-config`. An error is what `run` would refuse at start (exit 2).
pub fn run_check(args: &CheckArgs, flag_warnings: &[String]) -> Result<Outcome, UsageError> {
    let settings = args.run.settings()?;
    let mut warnings: Vec<String> = flag_warnings.to_vec();
    warnings.extend(settings.warnings.iter().cloned());
    let cloud = if settings.configure_cloud_routes {
        let cloud = cloud::read(
            &settings.provider,
            settings.cloud_config.as_deref(),
            &settings.controller.cluster_cidrs,
        )?;
        warnings.extend(cloud.warnings.iter().cloned());
        Some(cloud)
    } else {
        None
    };
    let mut out = String::new();
    let mut line = |what: &str, value: &str| {
        let _ = writeln!(out, "{what:<24} {value}");
    };
    match &cloud {
        Some(cloud) => {
            for (what, value) in cloud.describe() {
                line(what, &value);
            }
        }
        None => line(
            "routes",
            "none are managed (--configure-cloud-routes=false): run only serves health",
        ),
    }
    for (what, value) in run_lines(&settings) {
        line(what, &value);
    }
    if !warnings.is_empty() {
        let _ = writeln!(
            out,
            "\nwarnings ({}), as run would log them:",
            warnings.len()
        );
        for w in &warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    let mut status = 0;
    if args.probe {
        let _ = writeln!(out, "\nprobe (read-only calls):");
        for (what, result) in probe(&settings, cloud.as_ref()) {
            match result {
                Ok(found) => {
                    let _ = writeln!(out, "  {what}: ok, {found}");
                }
                Err(Probed::Refused(e)) => return Err(UsageError(format!("{what}: {e}"))),
                Err(Probed::Unreachable(e)) => {
                    status = 1;
                    let _ = writeln!(out, "  {what}: FAILED: {e}");
                }
            }
        }
    } else {
        let _ = writeln!(
            out,
            "\nNothing was asked of the cluster or the cloud; --probe checks both with \
             read-only calls."
        );
    }
    Ok(Outcome { text: out, status })
}

/// The settings of `run` beside the cloud's: the cluster, the mode, the API server,
/// leader election, serving, logs.
fn run_lines(settings: &run::RunSettings) -> Vec<(&'static str, String)> {
    use crate::controller::Mode;
    let c = &settings.controller;
    let cidrs: Vec<String> = c.cluster_cidrs.iter().map(ToString::to_string).collect();
    let mut lines = vec![
        (
            "cluster",
            format!(
                "{} (--cluster-name), cluster CIDRs {} (routes outside them are never deleted)",
                c.cluster_name,
                cidrs.join(", ")
            ),
        ),
        (
            "mode",
            match c.mode {
                Mode::Watch => format!(
                    "watch (KEP-5237): passes on node changes, a full resync every {} to {}",
                    crate::duration::format(c.min_resync_period),
                    crate::duration::format(c.min_resync_period * 2)
                ),
                _ => format!(
                    "poll, as upstream: a full pass every {}",
                    crate::duration::format(c.route_reconciliation_period)
                ),
            },
        ),
        ("nodes", format!("routing {}", settings.node_filter)),
        (
            "leader election",
            match &settings.lease {
                Some(l) => format!("Lease {}/{} as {}", l.namespace, l.name, l.identity),
                None => "off (--leader-elect=false): one replica only".to_string(),
            },
        ),
        ("API server", api_server(settings)),
        (
            "serving",
            match settings.serving.secure_address {
                Some(a) => format!(
                    "HTTPS on {a}: /metrics for an authorized token; /healthz, /readyz, /livez \
                     open"
                ),
                None => "no secure port (--secure-port=0)".to_string(),
            },
        ),
    ];
    lines.push((
        "proxy",
        match crate::ProxyEnv::from_process() {
            Ok(env) if env.is_set() => {
                format!("{env}; the instance metadata services never through a proxy")
            }
            Ok(_) => "none: HTTPS_PROXY and HTTP_PROXY are unset".to_string(),
            // cloud::read refused it already.
            Err(e) => e.0,
        },
    ));
    lines
}

/// Where the API server connection comes from, read from the kubeconfig without a
/// request.
fn api_server(settings: &run::RunSettings) -> String {
    use crate::kube::{Env, KubeConfig};
    match KubeConfig::load(&settings.load, &Env::from_process()) {
        Ok(kube) => kube.server.to_string(),
        Err(e) => format!("not found here ({e}); run reads it the same way in the pod"),
    }
}

/// Why a probe failed.
enum Probed {
    /// A setting is wrong: `run` would exit 2.
    Refused(String),
    /// Not reached, or failed this once: `run` would wait and try again.
    Unreachable(String),
}

/// The read-only calls of `--probe`, each with what it found.
fn probe(
    settings: &run::RunSettings,
    cloud: Option<&cloud::CloudSettings>,
) -> Vec<(&'static str, Result<String, Probed>)> {
    let mut results = Vec::new();
    if let Some(cloud) = cloud {
        let connected = cloud
            .connect(None, &crate::fence::Fence::open())
            .map_err(|e| match e {
                cloud::ProviderError::Config(e) => Probed::Refused(e.0),
                cloud::ProviderError::Outage(e) => Probed::Unreachable(e),
            });
        let listed = connected.and_then(|routes| {
            let nodes = crate::cloud::NodeDirectory::new(std::iter::empty());
            routes
                .list_routes(&settings.controller.cluster_name, &nodes)
                .map(|routes| format!("the provider started and listed {} route(s)", routes.len()))
                .map_err(|e| Probed::Unreachable(e.to_string()))
        });
        results.push(("the cloud", listed));
    }
    let api = (|| {
        use crate::kube::{Client, Env, KubeConfig};
        let kube = KubeConfig::load(&settings.load, &Env::from_process())
            .map_err(|e| Probed::Refused(format!("Kubernetes credentials: {e}")))?;
        let client = Client::new(&kube, settings.client.clone())
            .map_err(|e| Probed::Refused(format!("Kubernetes client: {e}")))?;
        crate::kube::discovery::check(&client, &crate::kube::discovery::LEASES)
            .map_err(Probed::Unreachable)?;
        Ok(format!("{} serves the Lease API", kube.server))
    })();
    results.push(("the API server", api));
    results
}
