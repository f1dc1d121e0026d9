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
//! let exit = handle.shutdown(); // stops passes, lets writes finish, joins the threads
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, bounded, unbounded};

use crate::actor::{self, ActorIo, Exit};
use crate::controller::{Config, Controller, PassReport};
use crate::fence::Fence;
use crate::kube::{self, Client, LeaseConfig, NodeWatch, StatusConfig, StopHandle, WatchConfig};
use crate::metrics::Metrics;
use crate::provider::Routes;
use crate::serve::{self, AccessConfig, CertSource, Health, Reviewer, ServerConfig, ServerHandle};
use crate::workers;

/// How long teardown waits for idle cloud workers to notice that the job channel closed.
const WORKER_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

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
    servers: Option<Servers>,
    fence: Option<Fence>,
}

/// The cloud request timeout assumed for the handover relist when no provider
/// declared one to the fence (the longest of ours, AWS's 20 s, with a margin).
const ASSUMED_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

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
            servers: None,
            fence: None,
        }
    }

    /// The fence the provider checks before each request (given to it with its
    /// `with_fence`): leader election opens and closes it, and without leader
    /// election it is opened for good. Without this call the workers still check a
    /// fence of their own before each operation, but an operation of several
    /// requests cannot be stopped between them.
    pub fn fence(mut self, fence: Fence) -> Builder {
        self.fence = Some(fence);
        self
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

    /// Serve `/metrics`, `/healthz` and `/readyz` on this address, over plain HTTP
    /// without authentication.
    pub fn serve_metrics(mut self, address: SocketAddr) -> Builder {
        self.metrics_address = Some(address);
        self
    }

    /// Use servers started earlier with [`Servers::start`] (so that probes and
    /// metrics were answered while the cloud was still being reached); their health
    /// answers follow the controller from now on. Replaces [`Builder::serve_metrics`].
    pub fn servers(mut self, servers: Servers) -> Builder {
        self.servers = Some(servers);
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
            servers,
            fence,
        } = self;
        config.leader_election = lease.is_some();
        let fence = fence.unwrap_or_default();
        match &lease {
            Some(lease) => {
                // The previous leader's last request lands by then at the latest.
                let bound = fence.request_bound().unwrap_or(ASSUMED_REQUEST_TIMEOUT);
                config
                    .handover_relist
                    .get_or_insert(lease.renew_deadline + bound);
            }
            None => fence.open_for_good(),
        }
        // The controller spends the provider's budget; workers never wait for it.
        if config.budget.is_none() {
            config.budget = cloud.budget();
        }
        if config.batch_size.is_none() {
            config.batch_size = cloud.batch_size();
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

        let servers = match (servers, metrics_address) {
            (Some(servers), _) => servers,
            (None, address) => Servers::start(
                &Serving {
                    plain_address: address,
                    ..Serving::off()
                },
                None,
                metrics.clone(),
            )
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::AddrInUse, e))?,
        };
        // From here the probes follow the controller: live while the actor runs,
        // ready once it has a complete view of the nodes.
        servers.state.started.store(true, Ordering::Relaxed);
        let workers = workers::spawn(
            cloud,
            fence.clone(),
            config.cluster_name.clone(),
            workers::pool_size(config.max_in_flight, config.budget, config.batch_size),
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
                fence.clone(),
                lease_stop.clone(),
            )?),
            None => None,
        };
        let watch = kube::spawn_node_watch(&client, watch, nodes_tx, metrics.clone())?;
        let controller = Controller::new(config, metrics.clone());
        let (teardown_fence, leader_election) = (fence.clone(), lease_thread.is_some());
        let io = ActorIo {
            nodes,
            cloud_replies,
            status_replies,
            leadership,
            shutdown,
            fence,
            cloud_jobs: jobs_tx,
            status_requests: status_tx,
            reports,
        };
        let state = servers.state.clone();
        let actor = std::thread::Builder::new()
            .name("reconcile-actor".into())
            .spawn(move || {
                let exit = actor::run(controller, io);
                state.running.store(false, Ordering::Relaxed);
                exit
            })?;
        Ok(Handle {
            fence: teardown_fence,
            leader_election,
            metrics,
            shutdown: shutdown_tx,
            actor: Some(actor),
            watch: Some(watch),
            lease_stop,
            lease_thread,
            status_thread: Some(status_thread),
            workers,
            servers: Some(servers),
        })
    }
}

/// How the metrics and health servers are served: the CCM's serving flags, as
/// `route-controller run` fills them. Field docs give the flags.
#[derive(Clone, Debug)]
pub struct Serving {
    /// `--bind-address`:`--secure-port`: HTTPS, `/metrics` only with an authorized
    /// bearer token; `None` with `--secure-port=0`.
    pub secure_address: Option<SocketAddr>,
    /// `--tls-cert-file`/`--tls-private-key-file`, or self-signed (`--cert-dir`).
    pub cert: CertSource,
    /// `--authentication-kubeconfig`: where TokenReviews go (default: the
    /// controller's own API server connection).
    pub authentication_kubeconfig: Option<PathBuf>,
    /// `--authorization-kubeconfig`: where SubjectAccessReviews go (default: the
    /// controller's own connection).
    pub authorization_kubeconfig: Option<PathBuf>,
    /// `--authorization-always-allow-paths` and the review caches.
    pub access: AccessConfig,
    /// `--metrics-bind-address`: plain HTTP without authentication, for local use;
    /// `None` (the default) is off.
    pub plain_address: Option<SocketAddr>,
}

impl Serving {
    /// Nothing served.
    pub fn off() -> Serving {
        Serving {
            secure_address: None,
            cert: CertSource::SelfSigned {
                cert_dir: None,
                hosts: Vec::new(),
            },
            authentication_kubeconfig: None,
            authorization_kubeconfig: None,
            access: AccessConfig::new(),
            plain_address: None,
        }
    }
}

/// What the process is doing, as the probes report it: starting (with what it waits
/// for), then running until the actor returns.
#[derive(Debug, Default)]
struct State {
    /// The controller's threads run ([`Builder::spawn`] was called).
    started: AtomicBool,
    /// The actor has not returned.
    running: AtomicBool,
    /// Before the start: what it waits for, e.g. "the cloud API: connection refused".
    waiting_for: Mutex<String>,
}

/// The metrics and health servers, started before the controller so that a start
/// that waits (for an unreachable cloud) is visible in `/readyz` and in the metrics.
pub struct Servers {
    state: Arc<State>,
    secure: Option<ServerHandle>,
    plain: Option<ServerHandle>,
}

impl Servers {
    /// Binds and starts the servers `serving` asks for. `reviewer` is required for
    /// the secure port. An error names the flag, the address and the cause (a port
    /// in use, an unusable certificate).
    pub fn start(
        serving: &Serving,
        reviewer: Option<Arc<dyn Reviewer>>,
        metrics: Arc<Metrics>,
    ) -> Result<Servers, String> {
        let state = Arc::new(State {
            waiting_for: Mutex::new("starting".into()),
            running: AtomicBool::new(true),
            ..State::default()
        });
        let health: serve::HealthFn = {
            let (m, state) = (metrics.clone(), state.clone());
            Arc::new(move || health(&m, &state))
        };
        let secure = match serving.secure_address {
            Some(address) => {
                let reviewer = reviewer.ok_or_else(|| {
                    "--secure-port: authorizing /metrics needs a connection to the API server"
                        .to_string()
                })?;
                let tls = serve::tls_config(&serving.cert)?;
                let secure = serve::Secure {
                    tls,
                    access: serving.access.clone(),
                    reviewer,
                };
                let server = serve::spawn_secure_server(
                    address,
                    metrics.clone(),
                    health.clone(),
                    ServerConfig::default(),
                    secure,
                )
                .map_err(|e| {
                    format!("--secure-port/--bind-address: cannot listen on {address}: {e}")
                })?;
                Some(server)
            }
            None => None,
        };
        let plain = match serving.plain_address {
            Some(address) => {
                Some(serve::spawn_server(address, metrics, health).map_err(|e| {
                    format!("--metrics-bind-address: cannot listen on {address}: {e}")
                })?)
            }
            None => None,
        };
        Ok(Servers {
            state,
            secure,
            plain,
        })
    }

    /// Until the controller starts, `/readyz` says it waits for `what`.
    pub fn waiting_for(&self, what: impl Into<String>) {
        *self
            .state
            .waiting_for
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = what.into();
    }

    /// The secure port's address, if it runs.
    pub fn secure_address(&self) -> Option<SocketAddr> {
        self.secure.as_ref().map(ServerHandle::local_addr)
    }

    /// The plain port's address, if it runs.
    pub fn plain_address(&self) -> Option<SocketAddr> {
        self.plain.as_ref().map(ServerHandle::local_addr)
    }

    fn stop(self) {
        for server in [self.secure, self.plain].into_iter().flatten() {
            server.stop();
        }
    }
}

/// `/healthz`: the process is starting, or the actor runs (an API server or cloud
/// outage does not make the process unhealthy: restarting it would not help);
/// `/readyz`: it has a complete view of the nodes (a standby replica is ready too).
fn health(metrics: &Metrics, state: &State) -> Health {
    if !state.started.load(Ordering::Relaxed) {
        let waiting = state
            .waiting_for
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        return Health {
            live: true,
            ready: false,
            detail: format!("starting; waiting for {waiting}"),
        };
    }
    let running = state.running.load(Ordering::Relaxed);
    let synced = metrics.synced.get() == 1;
    let insecure = crate::http::insecure_warning()
        .map(|w| format!("; {w}"))
        .unwrap_or_default();
    let watching = metrics.watch_healthy.get() == 1;
    let leading = metrics.leader.get() == 1;
    Health {
        live: running,
        ready: running && synced,
        detail: format!(
            "{}; watch {}; {}; {}{insecure}",
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
    /// Closed once the lease is lost: teardown need not wait for the API server then.
    fence: Fence,
    leader_election: bool,
    metrics: Arc<Metrics>,
    shutdown: Sender<()>,
    actor: Option<JoinHandle<Exit>>,
    watch: Option<NodeWatch>,
    lease_stop: StopHandle,
    lease_thread: Option<JoinHandle<()>>,
    status_thread: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
    servers: Option<Servers>,
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

    /// The address of the plain metrics server, if it runs.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.servers.as_ref().and_then(Servers::plain_address)
    }

    /// The address of the secure metrics server, if it runs.
    pub fn secure_address(&self) -> Option<SocketAddr> {
        self.servers.as_ref().and_then(Servers::secure_address)
    }

    /// A handle that asks for shutdown from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shutdown.clone())
    }

    /// Asks for a clean shutdown and waits for it: no new passes, in-flight cloud
    /// writes finish (bounded; a list is not waited for), the lease is released.
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
        // The fence is closed: this replica does not hold the lease (lost it, also
        // during a shutdown's drain, or never had it). Nothing is left to release or
        // to write, so a thread stuck on the API server is not waited for.
        let lost = self.leader_election && self.fence.check().is_err();
        self.teardown(exit == Exit::LostLeadership || lost);
        exit
    }

    /// Stops the other threads. After a lost lease (`prompt`) nothing is left to
    /// release and the process should end as the CCM's does, at once: a thread stuck
    /// in a request to an unreachable API server is not waited for beyond a grace.
    fn teardown(&mut self, prompt: bool) {
        if let Some(watch) = self.watch.take() {
            watch.stop();
        }
        // Stopping the elector releases the lease, so that a successor takes over at
        // once instead of after the lease duration.
        self.lease_stop.stop();
        let grace = std::time::Instant::now() + WORKER_STOP_GRACE;
        if let Some(t) = self.lease_thread.take() {
            join_within(t, prompt.then_some(grace), "the leader election");
        }
        // The actor's senders are gone: the status writer drains its queue and stops;
        // idle workers stop at once. The actor has already waited up to the drain
        // deadline for calls in flight, so a worker still inside one is left to finish
        // it on its own: joining it would stretch the 10 s drain to the provider's
        // timeout. It sends nothing more: the fence is closed.
        if let Some(t) = self.status_thread.take() {
            join_within(t, prompt.then_some(grace), "the status writer");
        }
        let grace = std::time::Instant::now() + WORKER_STOP_GRACE;
        for w in self.workers.drain(..) {
            join_within(w, Some(grace), "a cloud worker");
        }
        if let Some(servers) = self.servers.take() {
            servers.stop();
        }
    }
}

/// Joins `thread`, or leaves it running once `deadline` (if any) passes.
fn join_within(thread: JoinHandle<()>, deadline: Option<std::time::Instant>, what: &str) {
    if let Some(deadline) = deadline {
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if !thread.is_finished() {
            log::warn!("{what} is still inside a request; not waiting for it");
            return;
        }
    }
    let _ = thread.join();
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.actor.is_some() {
            let _ = self.shutdown.try_send(());
            if let Some(actor) = self.actor.take() {
                let _ = actor.join();
            }
            self.teardown(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client built with verification off keeps `/readyz` saying so, with the
    /// option to undo. Fails if agents stop recording it or the detail drops it.
    #[test]
    fn readyz_names_the_option_that_turned_tls_verification_off() {
        let mut trust = crate::Trust::new("ca-file in cloud.conf [Global]");
        trust.set_insecure("cloud.conf [Global] tls-insecure");
        let _agent = crate::http::agent_config(&trust, &crate::Proxying::Never);
        let state = State {
            started: AtomicBool::new(true),
            running: AtomicBool::new(true),
            waiting_for: Mutex::new(String::new()),
        };
        let h = health(&Metrics::new(), &state);
        assert!(
            h.detail
                .contains("TLS verification is off (cloud.conf [Global] tls-insecure)"),
            "{}",
            h.detail
        );
    }
}
