//! The route-controller binary: parses the command line and runs a subcommand.
//!
//! Exit status: 0 after a clean shutdown or a finished command; 1 when the controller
//! stops on its own (lost the leader lease, the node watch ended); 2 for invalid
//! configuration or input.
#![forbid(unsafe_code)]

use std::sync::Arc;

use route_controller::Builder;
use route_controller::actor::Exit;
use route_controller::cli::{self, Command, EXIT_USAGE, RunArgs, UsageError};
use route_controller::kube::{Client, Env, KubeConfig};
use route_controller::metrics::Metrics;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (cli, warnings) = cli::parse(&args);
    match cli.command {
        Command::Run(args) => std::process::exit(run(&args, &warnings)),
        Command::Plan(args) => finish(cli::run_plan(&args)),
        Command::Simulate(args) => finish(cli::run_simulate(&args)),
        Command::Manifests(args) => finish(cli::run_manifests(&args)),
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
    init_logging(args);
    for w in warnings {
        log::warn!("{w}");
    }
    let kube = KubeConfig::load(&settings.load, &Env::from_process())
        .unwrap_or_else(|e| usage_error(&UsageError(format!("Kubernetes credentials: {e}"))));
    let client = Client::new(&kube, settings.client.clone())
        .unwrap_or_else(|e| usage_error(&UsageError(format!("Kubernetes client: {e}"))));
    if !settings.configure_cloud_routes {
        log::info!(
            "--configure-cloud-routes=false: route-controller manages no routes; waiting for a signal"
        );
        wait_for_signal();
        return 0;
    }
    // One registry for the controller and the provider's HTTP requests, so that
    // /metrics shows both.
    let metrics = Arc::new(Metrics::new());
    let cloud = cli::run::provider(
        &settings.provider,
        settings.cloud_config.as_ref(),
        &settings.controller.cluster_cidrs,
        Some(metrics.clone()),
    )
    .unwrap_or_else(|e| usage_error(&e));
    let c = &settings.controller;
    log::info!(
        "route-controller {} starting: mode {}, cluster {}, cluster CIDRs {}, provider {}, leader election {}, \
         API server {}",
        env!("CARGO_PKG_VERSION"),
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
    let mut builder = Builder::new(settings.controller.clone(), client, cloud).metrics(metrics);
    if let Some(lease) = settings.lease.clone() {
        builder = builder.leader_election(lease);
    }
    if let Some(address) = settings.metrics_address {
        builder = builder.serve_metrics(address);
    }
    let handle = match builder.spawn() {
        Ok(h) => h,
        Err(e) => {
            log::error!("could not start: {e}");
            return 1;
        }
    };
    let stopper = handle.stopper();
    on_signal(Arc::new(move || stopper.stop()));
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

fn init_logging(args: &RunArgs) {
    let format = args
        .log_format
        .parse::<route_controller::logging::LogFormat>()
        .unwrap_or_else(|e| usage_error(&UsageError(format!("--log-format: {e}"))));
    route_controller::logging::init(format, args.log_level());
}

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

fn wait_for_signal() {
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    on_signal(Arc::new(move || {
        let _ = tx.try_send(());
    }));
    let _ = rx.recv();
}
