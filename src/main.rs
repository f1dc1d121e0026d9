//! The route-controller binary: parses the command line and runs a subcommand.
//!
//! Exit status: 0 after a clean shutdown or a finished command; 1 when the controller
//! stops on its own (lost the leader lease, the node watch ended); 2 for invalid
//! configuration or input.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use route_controller::actor::Exit;
use route_controller::cli::cloud::{CloudSettings, ProviderError};
use route_controller::cli::run::RunSettings;
use route_controller::cli::{self, Command, EXIT_USAGE, RunArgs, UsageError};
use route_controller::kube::discovery::{self, LEASES, SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS};
use route_controller::kube::{Client, Env, KubeConfig, LoadOptions};
use route_controller::metrics::Metrics;
use route_controller::serve::{DelegatedReviewer, Reviewer};
use route_controller::{Builder, Fence, Servers};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (command, warnings) = cli::parse(&args);
    match command {
        Command::Run(args) => std::process::exit(run(&args, &warnings)),
        Command::Plan(args) => finish(cli::run_plan(&args)),
        Command::Simulate(args) => finish(cli::run_simulate(&args)),
        Command::Manifests(args) => finish(cli::run_manifests(&args)),
        Command::CheckConfig(args) => match cli::check::run_check(&args, &warnings) {
            Ok(outcome) => {
                print!("{}", outcome.text);
                std::process::exit(outcome.status);
            }
            Err(e) => usage_error(&e),
        },
        Command::PluginCheck(args) => match cli::run_plugin_check(&args) {
            // Exit 1 when a check fails, so scripts and CI can gate on it.
            Ok(report) => {
                print!("{}", report.text);
                std::process::exit(if report.passed { 0 } else { 1 });
            }
            Err(e) => usage_error(&e),
        },
    }
}

/// Prints a command's output, or its one-line error with exit status 2.
fn finish(result: Result<String, UsageError>) {
    match result {
        Ok(text) => print!("{text}"),
        Err(e) => usage_error(&e),
    }
}

fn usage_error(e: &UsageError) -> ! {
    eprintln!("error: {e}");
    std::process::exit(EXIT_USAGE);
}

fn run(args: &RunArgs, warnings: &[String]) -> i32 {
    let settings = args.settings().unwrap_or_else(|e| usage_error(&e));
    route_controller::logging::init_verbosity(settings.log_format, settings.verbosity);
    for w in warnings.iter().chain(&settings.warnings) {
        log::warn!("{w}");
    }
    // The cloud config is read before the cluster is touched, so that a bad one fails
    // first; its warnings are logged once, not at every attempt to reach the cloud.
    let cloud_settings = settings.configure_cloud_routes.then(|| {
        cli::cloud::read(
            &settings.provider,
            settings.cloud_config.as_deref(),
            &settings.controller.cluster_cidrs,
        )
        .unwrap_or_else(|e| usage_error(&e))
    });
    for w in cloud_settings.iter().flat_map(|c| &c.warnings) {
        log::warn!("{w}");
    }
    // cloud::read refused a proxy variable that cannot be used; one that can is said
    // once, with any password hidden.
    if let Ok(env) = route_controller::ProxyEnv::from_process()
        && env.is_set()
    {
        log::info!("cloud and API server requests: {env}");
    }
    let kube = KubeConfig::load(&settings.load, &Env::from_process())
        .unwrap_or_else(|e| usage_error(&UsageError(format!("Kubernetes credentials: {e}"))));
    let client = Client::new(&kube, settings.client.clone())
        .unwrap_or_else(|e| usage_error(&UsageError(format!("Kubernetes client: {e}"))));
    // An API server without the Lease API would otherwise be a 404 retried for ever.
    if settings.configure_cloud_routes && settings.lease.is_some() {
        discovery::check(&client, &LEASES).unwrap_or_else(|e| usage_error(&UsageError(e)));
    }
    // Signals are handled from here on: a signal while the start waits for the cloud
    // ends the process cleanly, and later stops the controller.
    let (signal_tx, signals) = crossbeam_channel::bounded::<()>(1);
    on_signal(Arc::new(move || {
        let _ = signal_tx.try_send(());
    }));
    // One registry for the controller and the provider's HTTP requests, so that
    // /metrics shows both. The servers start first, so that a start that waits for
    // the cloud answers probes and shows why it waits.
    let metrics = Arc::new(Metrics::new());
    let reviewer = settings
        .serving
        .secure_address
        .map(|_| reviewer(&settings, &client));
    let servers = Servers::start(&settings.serving, reviewer, metrics.clone())
        .unwrap_or_else(|e| usage_error(&UsageError(e)));
    let Some(cloud_settings) = cloud_settings else {
        log::info!(
            "--configure-cloud-routes=false: route-controller manages no routes; waiting for a signal"
        );
        servers.waiting_for("nothing: --configure-cloud-routes=false");
        let _ = signals.recv();
        return 0;
    };
    // Leader election opens it (or the builder, without election); the provider
    // checks it before every request.
    let fence = Fence::new();
    let Some(cloud) = connect_cloud(&cloud_settings, &metrics, &servers, &signals, &fence) else {
        log::info!("signal received while waiting for the cloud; stopped");
        return 0;
    };
    let c = &settings.controller;
    log::info!(
        "route-controller {} starting: mode {}, cluster {}, cluster CIDRs {}, provider {}, leader election {}, \
         API server {}",
        route_controller::cli::version(),
        c.mode.as_str(),
        c.cluster_name,
        c.cluster_cidrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        cloud.provider_name(),
        settings
            .lease
            .as_ref()
            .map_or("off".to_string(), |l| format!(
                "{}/{} as {}",
                l.namespace, l.name, l.identity
            )),
        kube.server,
    );
    log::info!(
        "routing {}; the routes of other nodes are {}",
        settings.node_filter,
        if c.delete_routes_of_unselected_nodes {
            "deleted (--delete-routes-of-unselected-nodes)"
        } else {
            "left alone"
        }
    );
    let (watch_list, env_warning) = cli::run::watch_list(
        settings.watch_list,
        std::env::var(cli::run::WATCH_LIST_CLIENT_VAR)
            .ok()
            .as_deref(),
    );
    if let Some(w) = env_warning {
        log::warn!("{w}");
    }
    log::info!(
        "node lists: {}",
        match (watch_list, settings.watch_list) {
            (true, _) =>
                "streaming (watch-list) where the API server allows it, paginated otherwise",
            (false, false) => "paginated (--watch-list=false)",
            (false, true) => "paginated (KUBE_FEATURE_WatchListClient=false)",
        }
    );
    let watch = route_controller::kube::WatchConfig {
        filter: settings.node_filter.clone(),
        watch_list,
        protobuf: settings.watch_protobuf,
        ..route_controller::kube::WatchConfig::default()
    };
    let mut builder = Builder::new(settings.controller.clone(), client, cloud)
        .watch_config(watch)
        .metrics(metrics)
        .servers(servers)
        .fence(fence);
    if let Some(lease) = settings.lease.clone() {
        builder = builder.leader_election(lease);
    }
    let handle = match builder.spawn() {
        Ok(h) => h,
        Err(e) => {
            log::error!("could not start: {e}");
            return 1;
        }
    };
    let stopper = handle.stopper();
    let forwarded = std::thread::Builder::new()
        .name("signal-forward".into())
        .spawn(move || {
            if signals.recv().is_ok() {
                stopper.stop();
            }
        });
    if let Err(e) = forwarded {
        log::error!("cannot start the signal thread: {e}; SIGTERM will not stop cleanly");
    }
    match handle.wait() {
        Exit::Shutdown => {
            log::info!("stopped cleanly");
            0
        }
        Exit::LostLeadership => {
            log::error!("exiting because the leader lease was lost (another replica takes over)");
            1
        }
        Exit::WatchEnded => {
            log::error!("exiting because the node watch ended");
            1
        }
    }
}

/// The reviews of the secure port: on the controller's own connection unless
/// `--authentication-kubeconfig`/`--authorization-kubeconfig` name another.
fn reviewer(settings: &RunSettings, client: &Client) -> Arc<dyn Reviewer> {
    let connect = |flag: &str, path: &Option<std::path::PathBuf>| match path {
        None => client.clone(),
        Some(path) => {
            let load = LoadOptions {
                kubeconfig: Some(path.clone()),
                master: None,
                context: None,
            };
            KubeConfig::load(&load, &Env::from_process())
                .map_err(|e| e.to_string())
                .and_then(|k| Client::new(&k, settings.client.clone()).map_err(|e| e.to_string()))
                .unwrap_or_else(|e| usage_error(&UsageError(format!("{flag}: {e}"))))
        }
    };
    let authentication = connect(
        "--authentication-kubeconfig",
        &settings.serving.authentication_kubeconfig,
    );
    let authorization = connect(
        "--authorization-kubeconfig",
        &settings.serving.authorization_kubeconfig,
    );
    // Without them every scrape would fail; better one clear error at start.
    discovery::check(&authentication, &TOKEN_REVIEWS)
        .and_then(|()| discovery::check(&authorization, &SUBJECT_ACCESS_REVIEWS))
        .unwrap_or_else(|e| usage_error(&UsageError(e)));
    Arc::new(DelegatedReviewer {
        authentication,
        authorization,
    })
}

/// Builds the provider, waiting out an outage of the cloud's API with backoff (a
/// wrong setting still exits 2). `None` if a signal came while waiting.
fn connect_cloud(
    settings: &CloudSettings,
    metrics: &Arc<Metrics>,
    servers: &Servers,
    signals: &crossbeam_channel::Receiver<()>,
    fence: &Fence,
) -> Option<Arc<dyn route_controller::cloud::Routes>> {
    let mut delay = START_RETRY_FIRST;
    loop {
        let attempt = settings.connect(Some(metrics.clone()), fence);
        match attempt {
            Ok(cloud) => return Some(cloud),
            Err(ProviderError::Config(e)) => usage_error(&e),
            Err(ProviderError::Outage(e)) => {
                servers.waiting_for(format!("the cloud: {e}"));
                log::warn!("{e}; trying again in {delay:?}");
                if signals.recv_timeout(delay).is_ok() {
                    return None;
                }
                delay = (delay * 2).min(START_RETRY_MAX);
            }
        }
    }
}

/// Waits between attempts to reach the cloud at start: doubling from the first to the
/// last, so a short outage costs seconds and a long one a request every half minute.
const START_RETRY_FIRST: Duration = Duration::from_secs(1);
const START_RETRY_MAX: Duration = Duration::from_secs(30);

/// Calls `stop` on the first SIGTERM or SIGINT; a second one exits at once.
fn on_signal(stop: Arc<dyn Fn() + Send + Sync>) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            log::error!(
                "cannot handle signals ({e}); SIGTERM will kill the process without a clean shutdown"
            );
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut seen = 0;
            for signal in signals.forever() {
                seen += 1;
                if seen > 1 {
                    log::warn!("second signal {signal}: exiting now");
                    std::process::exit(130);
                }
                log::info!("signal {signal}: shutting down (send it again to exit at once)");
                stop();
            }
        });
    if let Err(e) = spawned {
        log::error!("cannot start the signal thread: {e}");
    }
}
