//! `cargo bench -- scale`: ours and upstream's route controller, one at a time, against
//! one real kube-apiserver holding a realistic 5 000-node cluster
//! (`tests/support/scale_cluster.rs`), each behind its own counting proxy
//! (`tests/support/fault_proxy.rs`).
//!
//! Per run: time to sync (upstream's node informer synced, our `/readyz`: InitDone) and
//! to have every route in the cloud (both as the in-memory cloud timed its last create:
//! upstream's announces it, ours' fake journals each); peak RSS (`VmHWM`) and RSS after
//! sync; CPU seconds (utime + stime) for an hour of kubelet status reports played
//! compressed; bytes read from the API server at start and on a relist; memory after
//! the relist.
//!
//! The relist is forced the way it happens in a cluster: the controller's proxy holds
//! its connections (nothing flows) while nodes change, etcd's history is compacted (as
//! the API server does every 5 minutes) and the API server restarts; its watch cache
//! then starts after the controller's last resource version and etcd no longer has
//! it, so the controller's resumed watch gets 410 Gone and it lists again.
//!
//! Runs: upstream with its in-memory cloud; ours with `--cloud-provider=fake` in its
//! process, with the same latency per call; ours with `--cloud-provider=hcloud` against
//! the Hetzner double in the bench process (the cloud out of the controller's
//! process, every route already in place), the run whose RSS the goal is about,
//! once as `cargo build --release` builds it (glibc) and once as the static musl build
//! the README recommends for images (`hcloud-musl`, which the bench builds).
//! All in watch mode (the gate of KEP-5237 on): the status reports are then the only
//! work, for both.
//!
//! Settings (environment): `RC_SCALE_NODES` (5000), `RC_BENCH_RUNS` (1),
//! `RC_SCALE_HEARTBEATS` (12 per node: one hour), `RC_SCALE_HEARTBEAT_SECONDS` (360:
//! how long that hour is played in), `RC_SCALE_CONNECTIONS` (8: the loader's parallel
//! connections), `RC_SCALE_ARGS` (more flags for ours, e.g. `--watch-list=false`),
//! `RC_SCALE_RUNS` (`upstream,fake,hcloud,hcloud-musl`: which runs; also `fake-musl`).
//! More than 20 000 nodes only under `ulimit -v`.

use std::time::{Duration, Instant, SystemTime};

use crate::Build;
use crate::controller_process::{ControllerProcess, Spawn};
use crate::fault_proxy::{FaultProxy, Mode};
use crate::hcloud_double::HcloudDouble;
use crate::kube_apiserver::{self, KubeApiserver};
use crate::scale_cluster::{self, ProcStats};
use crate::upstream_controller::{UpstreamController, UpstreamOptions};

/// How long each call of the in-process clouds (ours and upstream's) takes:
/// upstream's default.
const CLOUD_LATENCY: Duration = Duration::from_millis(100);
/// How long a controller may take to sync, and then to have every route.
const SYNC_TIMEOUT: Duration = Duration::from_secs(300);
/// The proxy counts as quiet (the controller has read what the server sent) once no
/// byte passed for this long.
const QUIET: Duration = Duration::from_secs(3);
/// Nodes whose status changes while a controller's connections are held, before
/// the API server restarts: what makes its resource version too old.
const CHANGED_WHILE_HELD: usize = 20;
/// Above this size the bench runs only under `ulimit -v`.
const UNBOUNDED_MAX_NODES: usize = 20_000;
/// Bytes after which a relist has begun: more than a TLS handshake and a 410.
const RELIST_STARTED_BYTES: u64 = 16 << 10;

const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";
const HCLOUD_TOKEN: &str = "scale-bench-token-scale-bench-token-scale-bench-token-scale-benc";
const HCLOUD_NETWORK: u64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Upstream,
    OursFake(Build),
    OursHcloud(Build),
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Upstream => "upstream, in-memory cloud",
            Kind::OursFake(Build::Glibc) => "ours, fake cloud in process",
            Kind::OursFake(Build::Musl) => "ours (musl), fake cloud in process",
            Kind::OursHcloud(Build::Glibc) => "ours, hcloud double (out of process)",
            Kind::OursHcloud(Build::Musl) => "ours (musl), hcloud double",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Kind::Upstream => "upstream",
            Kind::OursFake(Build::Glibc) => "fake",
            Kind::OursFake(Build::Musl) => "fake-musl",
            Kind::OursHcloud(Build::Glibc) => "hcloud",
            Kind::OursHcloud(Build::Musl) => "hcloud-musl",
        }
    }

    const ALL: [Kind; 5] = [
        Kind::Upstream,
        Kind::OursFake(Build::Glibc),
        Kind::OursFake(Build::Musl),
        Kind::OursHcloud(Build::Glibc),
        Kind::OursHcloud(Build::Musl),
    ];

    /// Whether the run plays the hour of status reports. The glibc hcloud run
    /// measures memory (its CPU would be the fake run's: in watch mode status reports
    /// make no cloud call); the musl one plays them, since its allocator is what
    /// differs.
    fn plays_heartbeats(self) -> bool {
        self != Kind::OursHcloud(Build::Glibc)
    }

    fn build(self) -> Option<Build> {
        match self {
            Kind::Upstream => None,
            Kind::OursFake(b) | Kind::OursHcloud(b) => Some(b),
        }
    }
}

struct Settings {
    nodes: usize,
    runs: usize,
    heartbeats: usize,
    heartbeat_window: Duration,
    connections: usize,
    ours_args: Vec<String>,
    kinds: Vec<Kind>,
}

impl Settings {
    fn from_env() -> Settings {
        let number = |key: &str, default: usize| -> usize {
            match std::env::var(key) {
                Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                    eprintln!("{key}={v:?}: not a number");
                    std::process::exit(2)
                }),
                Err(_) => default,
            }
        };
        let nodes = number("RC_SCALE_NODES", 5000);
        let kinds = std::env::var("RC_SCALE_RUNS")
            .unwrap_or_else(|_| "upstream,fake,hcloud,hcloud-musl".into())
            .split(',')
            .map(|k| {
                let k = k.trim();
                Kind::ALL
                    .into_iter()
                    .find(|kind| kind.key() == k)
                    .unwrap_or_else(|| {
                        let keys: Vec<&str> = Kind::ALL.iter().map(|k| k.key()).collect();
                        eprintln!("RC_SCALE_RUNS: unknown run {k:?}; use {}", keys.join(", "));
                        std::process::exit(2)
                    })
            })
            .collect();
        Settings {
            nodes,
            runs: crate::bench_runs(),
            heartbeats: number(
                "RC_SCALE_HEARTBEATS",
                nodes * scale_cluster::REPORTS_PER_NODE_HOUR,
            ),
            heartbeat_window: Duration::from_secs(number("RC_SCALE_HEARTBEAT_SECONDS", 360) as u64),
            connections: number("RC_SCALE_CONNECTIONS", 8).max(1),
            ours_args: std::env::var("RC_SCALE_ARGS")
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect(),
            kinds,
        }
    }

    /// How many real hours of status reports the played ones stand for.
    fn hours_played(&self) -> f64 {
        self.heartbeats as f64 / (self.nodes * scale_cluster::REPORTS_PER_NODE_HOUR) as f64
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
struct Figures {
    /// Process start to informer synced / InitDone.
    sync: Duration,
    /// Process start to every route in the cloud (the hcloud run: to its first pass
    /// done, every route being in place already).
    every_route: Duration,
    /// After sync and every route, and a few quiet seconds.
    synced: ProcStats,
    bytes_at_start: u64,
    /// CPU seconds over the status reports, per real hour of them.
    heartbeat_cpu_per_hour: Option<f64>,
    /// How long the reports took to play.
    heartbeat_took: Duration,
    after_heartbeats: ProcStats,
    relist_bytes: u64,
    after_relist: ProcStats,
}

pub fn scale() {
    let settings = Settings::from_env();
    if settings.nodes > UNBOUNDED_MAX_NODES && !address_space_limited() {
        eprintln!(
            "[scale] RC_SCALE_NODES={} needs a bound on memory: run it under `ulimit -v` \
             (e.g. `ulimit -v 16000000; cargo bench -- scale`)",
            settings.nodes
        );
        std::process::exit(2);
    }
    println!(
        "\n[scale] a real kube-apiserver with {} realistic nodes; upstream's route controller {} and ours, \
         one at a time, each behind a counting proxy, in watch mode ({} run(s)); commit {}",
        settings.nodes,
        crate::upstream_version(),
        settings.runs,
        crate::commit()
    );
    let started = Instant::now();
    kube_apiserver::harness_binary();
    kube_apiserver::upstream_route_controller_binary();
    for kind in &settings.kinds {
        if let Some(Err(e)) = kind.build().map(Build::binary) {
            eprintln!("[scale] {}: {e}", kind.label());
            std::process::exit(2);
        }
    }
    println!(
        "  Go programs and our builds ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let mut api = KubeApiserver::start_fresh();
    println!(
        "  kube-apiserver ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let took = scale_cluster::load_nodes(&api, settings.nodes, settings.connections);
    let stored = api.get_json(&format!("/api/v1/nodes/{}", scale_cluster::node_name(0)));
    println!(
        "  loaded {} nodes in {:.1} s over {} connections ({:.0} nodes/s); a node as stored: {:.1} KiB of JSON, \
         {} images, {} conditions, {} managedFields entries",
        settings.nodes,
        took.as_secs_f64(),
        settings.connections,
        settings.nodes as f64 / took.as_secs_f64(),
        stored.to_string().len() as f64 / 1024.0,
        stored["status"]["images"].as_array().map_or(0, Vec::len),
        stored["status"]["conditions"]
            .as_array()
            .map_or(0, Vec::len),
        stored["metadata"]["managedFields"]
            .as_array()
            .map_or(0, Vec::len),
    );
    drop(stored);
    if !settings.ours_args.is_empty() {
        println!(
            "  ours runs with RC_SCALE_ARGS: {}",
            settings.ours_args.join(" ")
        );
    }
    println!("  ours runs with {}", crate::allocator_summary());
    let dir = kube_apiserver::scratch_dir("bench-scale");
    let mut results: Vec<(Kind, Vec<Figures>)> =
        settings.kinds.iter().map(|k| (*k, Vec::new())).collect();
    let mut round_of_reports = 1;
    for round in 0..settings.runs {
        for (kind, figures) in results.iter_mut() {
            let t = Instant::now();
            let f = measure(
                &mut api,
                &settings,
                *kind,
                &mut round_of_reports,
                &dir.join(format!("{round}-{}", kind.key())),
            );
            println!(
                "  round {} {:<38} {:.0} s: synced {:.2} s, every route {:.2} s, peak {:.1} MiB, \
                 start {:.1} MiB read, relist {:.1} MiB read{}",
                round + 1,
                kind.label(),
                t.elapsed().as_secs_f64(),
                f.sync.as_secs_f64(),
                f.every_route.as_secs_f64(),
                mib(f.synced.peak_kib),
                f.bytes_at_start as f64 / (1 << 20) as f64,
                f.relist_bytes as f64 / (1 << 20) as f64,
                if kind.plays_heartbeats() {
                    format!(
                        ", {} reports in {:.0} s",
                        settings.heartbeats,
                        f.heartbeat_took.as_secs_f64()
                    )
                } else {
                    String::new()
                }
            );
            figures.push(f);
        }
    }
    drop(api);
    print_table(&settings, &results);
    let _ = std::fs::remove_dir_all(&dir);
}

fn print_table(settings: &Settings, results: &[(Kind, Vec<Figures>)]) {
    println!(
        "\n  {} nodes; ranges are min–max over {} run(s). sync: process start to informer synced (ours: InitDone); \
         routes: to every route\n  in the cloud, as the cloud timed it ({} ms per cloud call; the hcloud run: to its first pass, every route \
         already in place). RSS in MiB: peak (VmHWM)\n  and steady after sync, peak and RSS after the relist. CPU: \
         an hour of kubelet status reports ({} PATCHes of /status,\n  {:.2} h of them paced over {} s, or slower if the server\n  lags: the rounds above say how long), CPU seconds per real hour and % of one core. MiB read from the API server (TLS bytes\n  through the proxy) from process start \
         to every route, and on the relist (410 after an API server restart).",
        settings.nodes,
        settings.runs,
        CLOUD_LATENCY.as_millis(),
        settings.heartbeats,
        settings.hours_played(),
        settings.heartbeat_window.as_secs()
    );
    println!(
        "  {:<38} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11}",
        "controller, cloud",
        "sync s",
        "routes s",
        "peak",
        "steady",
        "relist peak",
        "after",
        "CPU s/h",
        "% core",
        "start MiB",
        "relist MiB"
    );
    for (kind, runs) in results {
        let of = |f: &dyn Fn(&Figures) -> f64, decimals: usize| {
            crate::range(&runs.iter().map(f).collect::<Vec<_>>(), decimals)
        };
        let cpu = |f: &Figures| f.heartbeat_cpu_per_hour.unwrap_or(f64::NAN);
        let (cpu_h, core) = if kind.plays_heartbeats() {
            (of(&cpu, 1), of(&|f| cpu(f) / 36.0, 3))
        } else {
            ("-".to_string(), "-".to_string())
        };
        println!(
            "  {:<38} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9} {:>11} {:>11}",
            kind.label(),
            of(&|f| f.sync.as_secs_f64(), 2),
            of(&|f| f.every_route.as_secs_f64(), 2),
            of(&|f| mib(f.synced.peak_kib), 1),
            of(&|f| mib(f.synced.rss_kib), 1),
            of(&|f| mib(f.after_relist.peak_kib), 1),
            of(&|f| mib(f.after_relist.rss_kib), 1),
            cpu_h,
            core,
            of(&|f| f.bytes_at_start as f64 / (1 << 20) as f64, 1),
            of(&|f| f.relist_bytes as f64 / (1 << 20) as f64, 1),
        );
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A controller under measurement.
enum Process {
    Upstream(UpstreamController),
    Ours(ControllerProcess),
}

impl Process {
    fn pid(&self) -> u32 {
        match self {
            Process::Upstream(c) => c.pid(),
            Process::Ours(c) => c.pid(),
        }
    }

    fn stats(&self, what: &str) -> ProcStats {
        ProcStats::of(self.pid())
            .unwrap_or_else(|| panic!("{what}: the controller (pid {}) is gone", self.pid()))
    }
}

/// One run: start the controller behind a fresh proxy, wait for sync and every route,
/// play the status reports, force a relist, stop.
fn measure(
    api: &mut KubeApiserver,
    settings: &Settings,
    kind: Kind,
    round_of_reports: &mut usize,
    dir: &std::path::Path,
) -> Figures {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let proxy = FaultProxy::start(api_address(api));
    let kubeconfig = kubeconfig_through(api, proxy.addr(), &dir.join("kubeconfig"));
    let hetzner = matches!(kind, Kind::OursHcloud(_)).then(|| hetzner_with_routes(settings.nodes));
    let started = Instant::now();
    let mut f = Figures::default();
    let process = match kind {
        Kind::Upstream => {
            let mut options = UpstreamOptions::new(&kubeconfig, scale_cluster::CLUSTER_CIDR);
            options.watch = true;
            options.cloud_latency = CLOUD_LATENCY;
            options.announce_routes = settings.nodes;
            let c = UpstreamController::start(&options, dir);
            f.sync = since(started, c.ready_at());
            let at = c.wait_for_routes(SYNC_TIMEOUT).unwrap_or_else(|| {
                panic!(
                    "upstream: not every route within {SYNC_TIMEOUT:?}; see {}",
                    c.log_file().display()
                )
            });
            f.every_route = since(started, at);
            Process::Upstream(c)
        }
        Kind::OursFake(build) | Kind::OursHcloud(build) => {
            let binary = build
                .binary()
                .unwrap_or_else(|e| panic!("{}: {e}", kind.label()));
            let mut spawn = Spawn::new()
                .binary(binary)
                .args([
                    "--leader-elect=false",
                    WATCH_MODE,
                    &format!("--cluster-cidr={}", scale_cluster::CLUSTER_CIDR),
                    &format!("--kubeconfig={}", kubeconfig.display()),
                    // In a cluster a relist comes hours after the last list of the
                    // cloud, so the relist's pass lists the routes again: so it does
                    // here, in every run (the glibc hcloud run, which plays no status
                    // reports, would otherwise relist on a view minutes old).
                    "--route-list-max-age=1s",
                ])
                .args(settings.ours_args.iter().cloned());
            // As the generated Deployment runs it (`cargo bench -- rss` does too).
            for (name, value) in crate::allocator_env() {
                spawn = spawn.env(name, value);
            }
            let journal = dir.join("journal.jsonl");
            let _ = std::fs::remove_file(&journal);
            spawn = match &hetzner {
                // The fake writes the wall-clock time of each route it creates: the
                // moment the cloud holds the last one is timed inside the process, as
                // upstream's in-memory cloud times its own.
                None => spawn
                    .arg("--cloud-provider=fake")
                    .env(
                        "ROUTE_CONTROLLER_FAKE_LATENCY",
                        format!("{}ms", CLOUD_LATENCY.as_millis()),
                    )
                    .env(
                        "ROUTE_CONTROLLER_FAKE_JOURNAL",
                        journal.display().to_string(),
                    ),
                Some(double) => spawn
                    .arg("--cloud-provider=hcloud")
                    .env("HCLOUD_TOKEN", HCLOUD_TOKEN)
                    .env("HCLOUD_NETWORK", HCLOUD_NETWORK.to_string())
                    .env("HCLOUD_ENDPOINT", double.endpoint())
                    .env(
                        "HCLOUD_NETWORK_ROUTE_LIMIT",
                        (settings.nodes + 100).to_string(),
                    ),
            };
            let mut c = spawn.spawn(&format!("bench-scale-{}", kind.key()));
            c.wait_ready(SYNC_TIMEOUT);
            f.sync = started.elapsed();
            f.every_route = match kind {
                Kind::OursFake(_) => {
                    since(started, wait_for_journal(&mut c, &journal, settings.nodes))
                }
                _ => {
                    wait_for_metric(&mut c, "route_controller_route_sync_total", &[], 1.0);
                    started.elapsed()
                }
            };
            Process::Ours(c)
        }
    };
    wait_quiet(&proxy);
    f.bytes_at_start = proxy.bytes().1;
    f.synced = process.stats("after sync");

    if kind.plays_heartbeats() {
        let before = process.stats("before the status reports");
        f.heartbeat_took = play_reports(api, settings, round_of_reports);
        wait_quiet(&proxy);
        f.after_heartbeats = process.stats("after the status reports");
        let cpu = f.after_heartbeats.cpu_seconds - before.cpu_seconds;
        f.heartbeat_cpu_per_hour = Some(cpu / settings.hours_played());
    }

    let mut process = process;
    let ours = match &mut process {
        Process::Ours(c) => Some(c),
        Process::Upstream(_) => None,
    };
    f.relist_bytes = force_relist(api, &proxy, settings, round_of_reports, ours);
    f.after_relist = process.stats("after the relist");
    match process {
        Process::Upstream(c) => {
            c.stop();
        }
        Process::Ours(mut c) => {
            c.assert_running();
            c.terminate();
        }
    }
    drop(hetzner);
    f
}

/// Plays the configured status reports, continuing the kubelets' clocks from the
/// last round played.
fn play_reports(api: &KubeApiserver, settings: &Settings, round: &mut usize) -> Duration {
    let took = scale_cluster::play_heartbeats(
        api,
        settings.nodes,
        settings.heartbeats,
        settings.heartbeat_window,
        settings.connections,
        *round,
    );
    *round += settings.heartbeats.div_ceil(settings.nodes);
    took
}

/// Holds the controller's connections, changes a few nodes, compacts etcd and restarts
/// the API server (its watch cache now starts after the controller's resource
/// version, which etcd no longer has), cuts the
/// held connections and lets traffic flow: the controller's watch resumes, gets 410
/// and lists again. Returns the bytes the controller read from then until quiet.
fn force_relist(
    api: &mut KubeApiserver,
    proxy: &FaultProxy,
    settings: &Settings,
    round: &mut usize,
    mut ours: Option<&mut ControllerProcess>,
) -> u64 {
    proxy.set(Mode::Stall);
    let changed = CHANGED_WHILE_HELD.min(settings.nodes);
    scale_cluster::play_heartbeats(api, changed, changed, Duration::ZERO, 1, *round);
    *round += 1;
    scale_cluster::compact_etcd(api);
    api.restart();
    proxy.cut();
    let before = proxy.bytes().1;
    proxy.set(Mode::Pass);
    // Wait for the relist to start (more than a reconnect's handshake and a 410: the
    // lists are gzipped, so a byte count proportional to the nodes would not do) and,
    // for ours, to be counted, then for quiet.
    let deadline = Instant::now() + SYNC_TIMEOUT;
    while proxy.bytes().1 - before < RELIST_STARTED_BYTES
        || ours
            .as_mut()
            .is_some_and(|c| c.metric_sum("route_controller_watch_relists_total", &[]) < 2.0)
    {
        assert!(
            Instant::now() < deadline,
            "no relist within {SYNC_TIMEOUT:?} of the API server's restart ({} bytes read)",
            proxy.bytes().1 - before
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_quiet(proxy);
    proxy.bytes().1 - before
}

/// Waits until no byte has passed the proxy for [`QUIET`].
fn wait_quiet(proxy: &FaultProxy) {
    let mut last = proxy.bytes();
    let mut since = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = proxy.bytes();
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= QUIET {
            return;
        }
    }
}

fn wait_for_metric(c: &mut ControllerProcess, name: &str, labels: &[(&str, &str)], want: f64) {
    let deadline = Instant::now() + SYNC_TIMEOUT;
    while c.metric_sum(name, labels) < want {
        if Instant::now() > deadline {
            c.fail(&format!(
                "{name}{labels:?} did not reach {want} within {SYNC_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the fake's journal holds `routes` routes and returns when the cloud
/// made the last of them: its own timestamp, so how often the file is read does not
/// matter (and reading it costs the controller nothing, where scraping `/metrics` would
/// take its CPU while it creates).
fn wait_for_journal(
    c: &mut ControllerProcess,
    journal: &std::path::Path,
    routes: usize,
) -> SystemTime {
    let deadline = Instant::now() + SYNC_TIMEOUT;
    loop {
        let created = crate::read_fake_journal(journal);
        if created.len() >= routes {
            return created.into_values().max().expect("at least one route");
        }
        if !c.is_running() {
            c.fail(&format!(
                "the controller exited with {} of {routes} routes created",
                created.len()
            ));
        }
        if Instant::now() > deadline {
            c.fail(&format!(
                "the fake cloud held {} of {routes} routes after {SYNC_TIMEOUT:?} ({})",
                created.len(),
                journal.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The Hetzner double with Hetzner's rate limit (3 600 requests, 1 more per second),
/// one network, a server for every node and every node's route already in place.
fn hetzner_with_routes(nodes: usize) -> HcloudDouble {
    let double = HcloudDouble::start(HCLOUD_TOKEN);
    double.set_rate_limit(3600, 1.0);
    double.set_route_limit(nodes + 100);
    double.add_network(HCLOUD_NETWORK, "k8s", "10.0.0.0/8", &["10.0.0.0/16"]);
    for i in 0..nodes {
        let ip = scale_cluster::internal_ip(i);
        let id = scale_cluster::server_id(i);
        double.add_server(id, &format!("server-{id}"), Some((HCLOUD_NETWORK, &ip)));
        double.put_route(HCLOUD_NETWORK, &scale_cluster::pod_cidr(i), &ip);
    }
    double
}

fn api_address(api: &KubeApiserver) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], api.port()))
}

/// A kubeconfig for the admin that talks to the API server through the proxy (the
/// serving certificate names 127.0.0.1, so TLS verification still holds).
fn kubeconfig_through(
    api: &KubeApiserver,
    proxy: std::net::SocketAddr,
    path: &std::path::Path,
) -> std::path::PathBuf {
    let config = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "admin",
        "clusters": [{"name": "scale", "cluster": {
            "server": format!("https://{proxy}"),
            "certificate-authority": api.ca_file(),
        }}],
        "users": [{"name": "admin", "user": {"token": api.admin_token()}}],
        "contexts": [{"name": "admin", "context": {"cluster": "scale", "user": "admin"}}],
    });
    std::fs::write(path, config.to_string())
        .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path.to_path_buf()
}

fn since(start: Instant, at: SystemTime) -> Duration {
    let ago = SystemTime::now().duration_since(at).unwrap_or_default();
    (Instant::now() - ago).saturating_duration_since(start)
}

/// Whether this process runs under `ulimit -v` (`Max address space` not unlimited).
fn address_space_limited() -> bool {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .is_some_and(|l| !l.contains("unlimited"))
}
