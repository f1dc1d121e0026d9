//! Running the controller: the threads of DESIGN.md wired around the actor, for the
//! binary and for tools that embed the controller.
//!
//! ```text
//! node watch ──NodeEvent──┐
//! leader election ─bool───┤
//! cloud workers ─replies──┼──> actor (owns Controller) ──CloudJob──> cloud workers
//! status writer ─replies──┘                             ──StatusRequest──> status writer
//! metrics server <── Metrics (atomics, read-only)
//! ```
//!
//! An embedding tool needs a controller [`Config`], a
//! Kubernetes [`Client`] and a cloud provider:
//!
//! ```no_run
//! use std::sync::Arc;
//! use route_controller::cloud::fake::FakeCloud;
//! use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};
//! use route_controller::{Builder, Cidr, Config};
//!
//! let kube = KubeConfig::load(&LoadOptions::default(), &Env::from_process())?;
//! let client = Client::new(&kube, ClientOptions::default())?;
//! let config = Config::new(vec![Cidr::parse("10.244.0.0/16")?]);
//! let handle = Builder::new(config, client, Arc::new(FakeCloud::new())).spawn()?;
//! // ... later, from any thread:
//! println!("{} passes so far", handle.metrics().passes_total());
//! let exit = handle.shutdown(); // stops passes, lets calls finish, joins the threads
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, bounded, unbounded};

use crate::actor::{self, ActorIo, Exit};
use crate::controller::{Config, Controller, PassReport};
use crate::kube::{self, Client, LeaseConfig, NodeWatch, StatusConfig, StopHandle, WatchConfig};
use crate::metrics::Metrics;
use crate::provider::Routes;
use crate::serve::{self, Health, ServerHandle};
use crate::workers;

/// Assembles the controller's threads.
pub struct Builder {
    config: Config,
    client: Client,
    cloud: Arc<dyn Routes>,
    lease: Option<LeaseConfig>,
    watch: WatchConfig,
    status: Option<StatusConfig>,
    metrics: Arc<Metrics>,
    reports: Option<Sender<PassReport>>,
    metrics_address: Option<SocketAddr>,
}

impl Builder {
    /// A controller with `config`, reading nodes with `client` and routing through
    /// `cloud`. Without [`Builder::leader_election`] it writes from the start.
    pub fn new(config: Config, client: Client, cloud: Arc<dyn Routes>) -> Builder {
        Builder {
            config,
            client,
            cloud,
            lease: None,
            watch: WatchConfig::default(),
            status: None,
            metrics: Arc::new(Metrics::new()),
            reports: None,
            metrics_address: None,
        }
    }

    /// Write only while holding this Lease.
    pub fn leader_election(mut self, lease: LeaseConfig) -> Builder {
        self.lease = Some(lease);
        self
    }

    /// Settings of the node watch (default [`WatchConfig::default`]).
    pub fn watch_config(mut self, watch: WatchConfig) -> Builder {
        self.watch = watch;
        self
    }

    /// Settings of condition writes and events (default: identity from the lease, or
    /// the host name).
    pub fn status_config(mut self, status: StatusConfig) -> Builder {
        self.status = Some(status);
        self
    }

    /// Record into this registry instead of a new one.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Builder {
        self.metrics = metrics;
        self
    }

    /// Also send every pass report here (they are logged in any case).
    pub fn reports(mut self, reports: Sender<PassReport>) -> Builder {
        self.reports = Some(reports);
        self
    }

    /// Serve `/metrics`, `/healthz` and `/readyz` on this address.
    pub fn serve_metrics(mut self, address: SocketAddr) -> Builder {
        self.metrics_address = Some(address);
        self
    }

    /// Starts every thread and returns at once.
    pub fn spawn(self) -> std::io::Result<Handle> {
        let Builder {
            mut config,
            client,
            cloud,
            lease,
            watch,
            status,
            metrics,
            reports,
            metrics_address,
        } = self;
        config.leader_election = lease.is_some();
        // The controller spends the provider's budget; workers never wait for it.
        if config.budget.is_none() {
            config.budget = cloud.budget();
        }
        let identity = lease
            .as_ref()
            .map(|l| l.identity.clone())
            .unwrap_or_else(kube::default_identity);
        let status = status.unwrap_or_else(|| StatusConfig::new(identity));

        let (nodes_tx, nodes) = unbounded();
        let (leadership_tx, leadership) = unbounded();
        let (shutdown_tx, shutdown) = bounded(1);
        let (jobs_tx, jobs) = unbounded();
        let (cloud_replies_tx, cloud_replies) = unbounded();
        let (status_tx, status_rx) = unbounded();
        let (status_replies_tx, status_replies) = unbounded();

        // Alive until the actor returns; /healthz reports it.
        let running = Arc::new(AtomicBool::new(true));
        let server = match metrics_address {
            Some(address) => {
                let (m, running) = (metrics.clone(), running.clone());
                let health: serve::HealthFn =
                    Arc::new(move || health(&m, running.load(Ordering::Relaxed)));
                Some(serve::spawn_server(address, metrics.clone(), health)?)
            }
            None => None,
        };
        let workers = workers::spawn(
            cloud,
            config.cluster_name.clone(),
            config.max_in_flight,
            jobs,
            cloud_replies_tx,
            metrics.clone(),
        )?;
        let status_thread = kube::spawn_status_writer(
            client.clone(),
            status,
            status_rx,
            status_replies_tx,
            metrics.clone(),
        )?;
        let lease_stop = StopHandle::new();
        let lease_thread = match lease {
            Some(lease) => Some(kube::spawn_leader_election(
                client.clone(),
                lease,
                leadership_tx,
                lease_stop.clone(),
            )?),
            None => None,
        };
        let watch = kube::spawn_node_watch(&client, watch, nodes_tx, metrics.clone())?;
        let controller = Controller::new(config, metrics.clone());
        let io = ActorIo {
            nodes,
            cloud_replies,
            status_replies,
            leadership,
            shutdown,
            cloud_jobs: jobs_tx,
            status_requests: status_tx,
            reports,
        };
        let actor = std::thread::Builder::new()
            .name("reconcile-actor".into())
            .spawn(move || actor::run(controller, io))?;
        Ok(Handle {
            metrics,
            shutdown: shutdown_tx,
            actor: Some(actor),
            watch: Some(watch),
            lease_stop,
            lease_thread,
            status_thread: Some(status_thread),
            workers,
            server,
        })
    }
}

/// `/healthz`: the actor runs (an API server outage does not make the process
/// unhealthy: restarting it would not help); `/readyz`: it has a complete view of the
/// nodes (a standby replica is ready too).
fn health(metrics: &Metrics, running: bool) -> Health {
    let synced = metrics.synced.get() == 1;
    let watching = metrics.watch_healthy.get() == 1;
    let leading = metrics.leader.get() == 1;
    Health {
        live: running,
        ready: running && synced,
        detail: format!(
            "{}; watch {}; {}; {}",
            if running { "running" } else { "stopped" },
            if watching {
                "connected"
            } else {
                "reconnecting"
            },
            if synced { "synced" } else { "not synced yet" },
            if leading { "leading" } else { "standing by" }
        ),
    }
}

/// The running controller.
pub struct Handle {
    metrics: Arc<Metrics>,
    shutdown: Sender<()>,
    actor: Option<JoinHandle<Exit>>,
    watch: Option<NodeWatch>,
    lease_stop: StopHandle,
    lease_thread: Option<JoinHandle<()>>,
    status_thread: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    server: Option<ServerHandle>,
}

/// Asks a running controller to shut down, from any thread (a signal handler).
#[derive(Clone)]
pub struct Stopper(Sender<()>);

impl Stopper {
    /// Asks for a clean shutdown; returns at once.
    pub fn stop(&self) {
        let _ = self.0.try_send(());
    }
}

impl Handle {
    /// The registry the threads record into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The address the metrics server listens on, if it runs.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(ServerHandle::local_addr)
    }

    /// A handle that asks for shutdown from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shutdown.clone())
    }

    /// Asks for a clean shutdown and waits for it: no new passes, in-flight cloud
    /// calls finish (bounded), the lease is released.
    pub fn shutdown(self) -> Exit {
        self.stopper().stop();
        self.wait()
    }

    /// Waits until the controller stops: after a shutdown request, a lost lease, or the
    /// end of the node watch. Then stops the other threads.
    pub fn wait(mut self) -> Exit {
        let exit = match self.actor.take().map(JoinHandle::join) {
            Some(Ok(exit)) => exit,
            _ => {
                log::error!("the reconcile actor panicked");
                Exit::WatchEnded
            }
        };
        self.teardown();
        exit
    }

    fn teardown(&mut self) {
        if let Some(watch) = self.watch.take() {
            watch.stop();
        }
        // Stopping the elector releases the lease, so that a successor takes over at
        // once instead of after the lease duration.
        self.lease_stop.stop();
        if let Some(t) = self.lease_thread.take() {
            let _ = t.join();
        }
        // The actor's senders are gone: the status writer drains its queue and stops;
        // workers finish their call in hand (bounded by the provider's timeouts).
        if let Some(t) = self.status_thread.take() {
            let _ = t.join();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        if let Some(server) = self.server.take() {
            server.stop();
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.actor.is_some() {
            let _ = self.shutdown.try_send(());
            if let Some(actor) = self.actor.take() {
                let _ = actor.join();
            }
            self.teardown();
        }
    }
}
