//! Benchmarks: `cargo bench`. They print numbers; nothing here asserts a time.
//!
//! 1. Watch events decoded and filtered per second, on realistic node JSON (image
//!    lists, managed fields, conditions): the watch's line decoder plus the
//!    controller's trigger filter, as the node watch thread and the actor run them.
//! 2. Planner time at 5 000 and 50 000 nodes.
//! 3. Peak RSS of `route-controller run --cloud-provider fake` with 5 000 and 50 000
//!    nodes served by a minimal API server in this process.
//! 4. Cloud calls per node change in each simulated scenario, per mode; and the time
//!    `route-controller simulate` takes (`simulate`): its default run and each scenario,
//!    wall and CPU of the whole process, as a user who runs it sees them.
//! 5. Upstream's real route controller (the Go program in
//!    `tests/kube-apiserver/upstream-route-controller`) beside ours, one at a time
//!    against one real kube-apiserver, in poll and watch mode, on a scripted rolling
//!    replacement in real time; and the same scenario in our emulation (`sim`).
//! 6. The chaos run of `tests/e2e_chaos.rs` (`tests/support/chaos.rs`), longer and over
//!    several seeds: `CHAOS_SEEDS` (comma-separated, default `1,2,3,4,5`),
//!    `CHAOS_SECONDS` (default 120) and `CHAOS_CLOUDS` (`hcloud,aws`). It prints the
//!    figures of each run and exits 1 if any run saw a violation or did not converge.
//!
//! 7. A real 5 000-node cluster (`benches/scale/mod.rs`): ours and upstream's
//!    controller against a real kube-apiserver holding realistic nodes: sync time,
//!    memory, CPU for an hour of status reports, bytes read at start and on a relist.
//!
//! `cargo bench -- NAME` runs only the parts whose name contains NAME (`events`,
//! `planner`, `rss`, `calls`, `simulate`, `upstream`, `peers`, `chaos`, `scale`).
//!
//! The first line names the commit measured (`-dirty` if the tree differs from it), and
//! `RC_BENCH_RUNS=N` (default 1) runs `events`, `planner`, `calls`, `upstream`,
//! `peers` and `scale` N times and prints each figure's range: what the README publishes.

// The support modules each carry their own copy of `http_wire.rs` and `prometheus.rs`
// (each test binary includes only some of them); the chaos run brings several together.
#![allow(clippy::duplicate_mod)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[path = "../tests/support/aws_peer.rs"]
mod aws_peer;
#[path = "../tests/support/chaos.rs"]
mod chaos;
#[path = "../tests/support/chaos_openstack.rs"]
mod chaos_openstack;
#[path = "../tests/support/controller_process.rs"]
mod controller_process;
#[path = "../tests/support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "../tests/support/e2e_hcloud.rs"]
mod e2e_hcloud;
#[path = "../tests/support/fault_proxy.rs"]
mod fault_proxy;
#[path = "../tests/support/gce_double.rs"]
mod gce_double;
#[path = "../tests/support/gce_peer.rs"]
mod gce_peer;
#[path = "../tests/support/hcloud_double.rs"]
mod hcloud_double;
#[path = "../tests/support/http_fault.rs"]
mod http_fault;
#[path = "../tests/support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "../tests/support/moto.rs"]
mod moto;
#[path = "../tests/support/openstack_real.rs"]
mod openstack_real;
#[path = "../tests/support/prometheus.rs"]
mod prometheus;
mod scale;
#[path = "../tests/support/scale_cluster.rs"]
mod scale_cluster;
#[path = "../tests/support/upstream_controller.rs"]
mod upstream_controller;

use route_controller::kube::WatchConfig;
use route_controller::kube::watch::{LineOutcome, Reflector};
use route_controller::manifests::ALLOCATOR_ENV;
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, Node, NodeAddress, NodeList, Route};
use route_controller::plan;
use route_controller::sim::{self, Scenario, SimOptions};
use route_controller::{Config, Controller, Input, Mode, NodeEvent};

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    println!(
        "route-controller benchmarks ({} build), commit {}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        commit()
    );
    if wanted("events") {
        events();
    }
    if wanted("planner") {
        planner();
    }
    if wanted("rss") {
        rss();
    }
    if wanted("calls") {
        calls();
    }
    if wanted("simulate") {
        simulate();
    }
    if wanted("upstream") {
        upstream();
    }
    // `-- peers` runs both peers benches, `-- peers-aws` and `-- peers-gce` one each.
    if wanted("peers-aws") {
        peers();
    }
    if wanted("peers-gce") {
        peers_gce();
    }
    if wanted("chaos") {
        chaos();
    }
    if wanted("scale") {
        scale::scale();
    }
}

// --- what every published figure needs: its commit and its range over runs ----------

/// The commit measured, as the README cites it: `git rev-parse --short=7 HEAD`, with
/// `-dirty` when tracked files differ from it (a figure of uncommitted code cannot be
/// reproduced, so the README must not cite it).
fn commit() -> String {
    let root = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
    };
    let head = match git(&["rev-parse", "--short=7", "HEAD"]) {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => return "unknown (not a git checkout, or git is not installed)".to_string(),
    };
    // `git diff --quiet HEAD` exits 1 when a tracked file differs from HEAD.
    match git(&["diff", "--quiet", "HEAD", "--"]) {
        Ok(out) if out.status.success() => head,
        _ => format!("{head}-dirty"),
    }
}

/// `RC_BENCH_RUNS` (default 1): how many times a part measures each figure, so that
/// the README can publish the range and not one draw.
fn bench_runs() -> usize {
    match std::env::var("RC_BENCH_RUNS") {
        Err(_) => 1,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                eprintln!("RC_BENCH_RUNS={v:?}: expected a number of runs, 1 or more");
                std::process::exit(2);
            }
        },
    }
}

/// `min–max` of `values` with `decimals` digits, or one value when every run gave the
/// same (to the digits shown); `-` when there is none (every run failed).
fn range(values: &[f64], decimals: usize) -> String {
    if values.is_empty() {
        return "-".to_string();
    }
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = (format!("{min:.decimals$}"), format!("{max:.decimals$}"));
    if lo == hi { lo } else { format!("{lo}–{hi}") }
}

/// CPU time this thread has run for, from Linux's `/proc/thread-self/schedstat` (its
/// first field, in ns; `None` elsewhere). With six engineers' builds on two cores a
/// thread gets a fraction of a core and wall time measures the load, so `events` and
/// `planner` publish CPU time. The kernel brings the figure up to date at each tick and
/// switch, so a reading can lag by one tick (at most 4 ms): measure over batches of a
/// few hundred ms.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

// --- the builds of the controller that are measured ---------------------------------

/// A build of the controller. `cargo build --release` links it dynamically against the
/// machine's glibc (the binary Cargo built for this bench); the static musl build is
/// the one the README recommends for images (no libc to bring, and smaller in memory:
/// no shared libraries' pages, and musl's allocator keeps less). `RC_BENCH_BUILDS`
/// (`glibc,musl`) says which the `rss` and `scale` parts measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Build {
    Glibc,
    Musl,
}

const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

impl Build {
    fn label(self) -> &'static str {
        match self {
            Build::Glibc => "glibc, dynamic",
            Build::Musl => "musl, static",
        }
    }

    /// The binary, built first for musl; the error says what to install.
    fn binary(self) -> Result<std::path::PathBuf, String> {
        match self {
            Build::Glibc => Ok(env!("CARGO_BIN_EXE_route-controller").into()),
            Build::Musl => musl_binary(),
        }
    }
}

/// `RC_BENCH_BUILDS` (default `glibc,musl`).
fn bench_builds() -> Vec<Build> {
    std::env::var("RC_BENCH_BUILDS")
        .unwrap_or_else(|_| "glibc,musl".into())
        .split(',')
        .map(|b| match b.trim() {
            "glibc" => Build::Glibc,
            "musl" => Build::Musl,
            other => {
                eprintln!("RC_BENCH_BUILDS: unknown build {other:?}; use glibc and musl");
                std::process::exit(2);
            }
        })
        .collect()
}

/// `cargo build --release --target x86_64-unknown-linux-musl`, once per bench run, into
/// `target/musl` (a target directory of its own: the one of this `cargo bench` is
/// locked while it runs).
fn musl_binary() -> Result<std::path::PathBuf, String> {
    static BUILT: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let target_dir = root.join("target").join("musl");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let started = Instant::now();
            let out = std::process::Command::new(cargo)
                .args([
                    "build",
                    "--release",
                    "--bin",
                    "route-controller",
                    "--target",
                ])
                .arg(MUSL_TARGET)
                .arg("--target-dir")
                .arg(&target_dir)
                .current_dir(root)
                .output()
                .map_err(|e| format!("cargo build --target {MUSL_TARGET}: {e}"))?;
            if !out.status.success() {
                let stderr = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
                return Err(format!(
                    "the static musl build failed; it needs the target and a musl C compiler \
                     (ring has C code): `rustup target add {MUSL_TARGET}` and \
                     `apt-get install musl-tools` (or RC_BENCH_BUILDS=glibc to measure the \
                     glibc build alone). cargo said: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                ));
            }
            println!(
                "      (the static musl build is ready after {:.0} s)",
                started.elapsed().as_secs_f64()
            );
            Ok(target_dir
                .join(MUSL_TARGET)
                .join("release")
                .join("route-controller"))
        })
        .clone()
}

// --- the chaos run, longer ------------------------------------------------------------

fn chaos() {
    let seeds: Vec<u64> = std::env::var("CHAOS_SEEDS")
        .unwrap_or_else(|_| "1,2,3,4,5".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let seconds: u64 = chaos::env_or("CHAOS_SECONDS", 120);
    let clouds = std::env::var("CHAOS_CLOUDS").unwrap_or_else(|_| "hcloud,aws".into());
    println!(
        "\n[chaos] two replicas, a real kube-apiserver, fault proxies; {seconds} s of faults per run, \
         seeds {seeds:?}, clouds {clouds}"
    );
    let mut failed = Vec::new();
    for cloud in clouds.split(',').map(str::trim) {
        for &seed in &seeds {
            let settings = chaos::Settings { seed, seconds };
            let figures = match cloud {
                "hcloud" => chaos::hetzner(settings),
                "aws" => chaos::aws(settings),
                "openstack" => chaos_openstack::openstack(settings, openstack_real::Mode::Atomic),
                "openstack-without-atomic" => {
                    chaos_openstack::openstack(settings, openstack_real::Mode::WithoutAtomic)
                }
                other => {
                    eprintln!(
                        "CHAOS_CLOUDS: unknown cloud {other:?}; use hcloud, aws, openstack and \
                         openstack-without-atomic"
                    );
                    std::process::exit(2);
                }
            };
            println!("{figures}");
            if !figures.ok() {
                failed.push(format!("{cloud} seed {seed}"));
            }
        }
    }
    if !failed.is_empty() {
        eprintln!("[chaos] runs with violations or no convergence: {failed:?}");
        std::process::exit(1);
    }
}

// --- realistic node JSON -------------------------------------------------------------

/// A node as a kubelet reports it: 40 images with digests, managed fields, the usual
/// conditions, labels and annotations. About 12 KiB of JSON.
fn node_json(i: usize, rv: u64) -> String {
    node_json_in(BenchCloud::Fake, i, rv)
}

/// [`node_json`] for a node of `cloud`: its providerID and pod CIDR fit that cloud.
fn node_json_in(cloud: BenchCloud, i: usize, rv: u64) -> String {
    let name = format!("node-{i}");
    let images: Vec<serde_json::Value> = (0..40)
        .map(|k| {
            serde_json::json!({
                "names": [
                    format!("registry.example.com/team-{k}/service-{k}@sha256:{:064x}", i * 1000 + k),
                    format!("registry.example.com/team-{k}/service-{k}:v1.{k}.{}", i % 10),
                ],
                "sizeBytes": 10_000_000 + k * 12345,
            })
        })
        .collect();
    let condition = |t: &str, s: &str, r: &str| {
        serde_json::json!({"type": t, "status": s, "reason": r, "message": format!("{r} on {name}"),
            "lastHeartbeatTime": "2026-11-30T20:41:10Z", "lastTransitionTime": "2026-11-20T08:00:00Z"})
    };
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": format!("00000000-0000-4000-8000-{i:012}"), "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-11-20T08:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "cx32",
                       "topology.kubernetes.io/region": "fsn1", "topology.kubernetes.io/zone": "fsn1-dc14"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-30T20:41:10Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastHeartbeatTime": {}}}, "f:images": {}, "f:nodeInfo": {"f:bootID": {}}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-20T08:00:02Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}}}}},
                {"manager": "route-controller", "operation": "Update", "apiVersion": "v1", "time": "2026-11-20T08:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"NetworkUnavailable\"}": {".": {}}}}}}
            ]
        },
        "spec": {"podCIDR": cloud.pod_cidr(i), "podCIDRs": [cloud.pod_cidr(i)], "providerID": cloud.provider_id(i)},
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("172.16.{}.{}", (i >> 8) & 255, i & 255)}, {"type": "Hostname", "address": name}],
            "capacity": {"cpu": "4", "memory": "7935432Ki", "pods": "110", "ephemeral-storage": "157197304Ki"},
            "allocatable": {"cpu": "4", "memory": "7833032Ki", "pods": "110", "ephemeral-storage": "144871826124"},
            "conditions": [
                condition("NetworkUnavailable", "False", "RouteCreated"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID"),
                condition("Ready", "True", "KubeletReady"),
            ],
            "images": images,
            "nodeInfo": {"kubeletVersion": "v1.35.0", "containerRuntimeVersion": "containerd://2.1.4", "kernelVersion": "6.12.0",
                         "osImage": "Debian GNU/Linux 13 (trixie)", "architecture": "amd64", "operatingSystem": "linux",
                         "machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"), "bootID": format!("{i:032x}")},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
        }
    })
    .to_string()
}

fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", (i >> 8) & 255, i & 255)
}

fn slim_node(i: usize) -> Node {
    Node {
        name: format!("node-{i}"),
        uid: format!("uid-{i}"),
        resource_version: "1".into(),
        provider_id: Some(format!("fake://{i}")),
        pod_cidrs: vec![pod_cidr(i)],
        addresses: vec![NodeAddress::internal_ip(&format!(
            "172.16.{}.{}",
            (i >> 8) & 255,
            i & 255
        ))],
        network_unavailable: None,
    }
}

// --- 1. watch events -------------------------------------------------------------------

fn events() {
    let nodes = 1000;
    let rounds = 50; // 50 heartbeats of each node: 50 000 events
    let lines: Vec<String> = (0..rounds)
        .flat_map(|r| (0..nodes).map(move |i| (r, i)))
        .map(|(r, i)| {
            format!(
                "{{\"type\":\"MODIFIED\",\"object\":{}}}",
                node_json(i, 1000 + (r * nodes + i) as u64)
            )
        })
        .collect();
    let bytes: usize = lines.iter().map(String::len).sum();
    let runs = bench_runs();
    println!(
        "\n[events] {} heartbeat MODIFIED events of {:.1} KiB nodes decoded and filtered ({runs} run(s)):",
        lines.len(),
        bytes as f64 / lines.len() as f64 / 1024.0,
    );
    let (mut per_cpu_second, mut mib_per_cpu_second, mut per_second) = (vec![], vec![], vec![]);
    for run in 1..=runs {
        let (wall, cpu, forwarded, passes) = decode_and_filter(nodes, &lines);
        per_second.push(lines.len() as f64 / wall.as_secs_f64());
        let cpu = cpu.unwrap_or(wall).as_secs_f64();
        per_cpu_second.push(lines.len() as f64 / cpu);
        mib_per_cpu_second.push(bytes as f64 / cpu / (1 << 20) as f64);
        println!(
            "  run {run}: {cpu:.2} s of CPU ({:.2} s of wall time): {:.0} events per CPU second, {:.0} MiB; \
             {forwarded} forwarded, {passes} passes triggered",
            wall.as_secs_f64(),
            per_cpu_second[run - 1],
            mib_per_cpu_second[run - 1],
        );
    }
    println!(
        "  range over {runs} run(s): {} events per CPU second ({} MiB of JSON); per wall second: {}",
        range(&per_cpu_second, 0),
        range(&mib_per_cpu_second, 0),
        range(&per_second, 0)
    );
}

/// One run of `events`: a fresh controller that knows the `nodes` and a fresh watch,
/// fed every line; returns the wall and CPU time taken, the events forwarded and the
/// passes they triggered (heartbeats should trigger none).
fn decode_and_filter(nodes: usize, lines: &[String]) -> (Duration, Option<Duration>, u64, u64) {
    let mut config = Config::new(vec![Cidr::parse("10.0.0.0/8").unwrap()]);
    config.seed = Some(1);
    let mut controller = Controller::new(config, Arc::new(Metrics::new()));
    let now = Instant::now();
    // Only the decoding and filtering are measured: the commands (the startup pass's
    // list) are dropped, so no pass ever runs and heartbeats stay filtered out.
    let _ = controller.handle(Input::Node(NodeEvent::Init), now);
    for i in 0..nodes {
        let node: Node = serde_json::from_str(&node_json(i, 999)).unwrap();
        let _ = controller.handle(Input::Node(NodeEvent::InitApply(node)), now);
    }
    let _ = controller.handle(Input::Node(NodeEvent::InitDone), now);
    let mut reflector = Reflector::new(WatchConfig::default());
    let list = NodeList {
        items: Vec::new(),
        metadata: route_controller::model::ListMeta {
            resource_version: "999".into(),
            ..Default::default()
        },
    };
    reflector.on_list_page(Ok(list), now);
    reflector.on_watch_started(Ok(()), now);
    let passes_before = controller.metrics().passes_total();
    let start = Instant::now();
    let cpu_start = thread_cpu_time();
    let mut forwarded = 0u64;
    for line in lines {
        if let LineOutcome::Event(event) = reflector.on_watch_line(line.as_bytes(), now) {
            forwarded += 1;
            let _ = controller.handle(Input::Node(event), now);
        }
    }
    let took = start.elapsed();
    let cpu = thread_cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| end - start);
    let passes = controller.metrics().passes_total() - passes_before;
    (took, cpu, forwarded, passes)
}

// --- 2. planner --------------------------------------------------------------------------

fn planner() {
    let runs = bench_runs();
    println!(
        "\n[planner] plan() with every route in place (the common pass), and with 10 % of routes missing; \
         CPU time a plan (over 0.3 s of CPU) and the wall time's median, range over {runs} run(s):"
    );
    let cidrs = vec![Cidr::parse("10.0.0.0/8").unwrap()];
    for n in [5_000usize, 50_000] {
        let nodes: Vec<Node> = (0..n).map(slim_node).collect();
        let routes: Vec<Route> = nodes
            .iter()
            .map(|node| Route {
                name: format!("r-{}", node.name),
                target_node: node.name.clone(),
                target_node_addresses: node.addresses.clone(),
                destination_cidr: node.pod_cidrs[0].clone(),
                ..Route::default()
            })
            .collect();
        let partial: Vec<Route> = routes
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 != 0)
            .map(|(_, r)| r.clone())
            .collect();
        for (label, routes) in [("all routes in place", &routes), ("10 % missing", &partial)] {
            let (mut cpu_means, mut medians) = (Vec::new(), Vec::new());
            let mut creates = 0;
            for _ in 0..runs {
                let mut times = Vec::new();
                let cpu_start = thread_cpu_time();
                // At least 7 plans, and enough for 0.3 s of CPU (see thread_cpu_time).
                while times.len() < 7
                    || thread_cpu_time()
                        .zip(cpu_start)
                        .is_some_and(|(now, start)| now - start < Duration::from_millis(300))
                {
                    let start = Instant::now();
                    let p = plan::plan(&nodes, routes, &cidrs);
                    times.push(start.elapsed());
                    creates = p.creates.len();
                }
                if let Some((end, start)) = thread_cpu_time().zip(cpu_start) {
                    cpu_means.push((end - start).as_secs_f64() * 1e3 / times.len() as f64);
                }
                times.sort();
                medians.push(times[times.len() / 2].as_secs_f64() * 1e3);
            }
            println!(
                "  {n:>6} nodes, {label:<20}: {:>11} ms of CPU a plan; wall median {:>11} ms ({creates} creates)",
                range(&cpu_means, 1),
                range(&medians, 1)
            );
        }
    }
}

// --- 3. peak RSS ---------------------------------------------------------------------

/// Where the bench's cloud lives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BenchCloud {
    /// `--cloud-provider=fake`: the route table is in the controller's own memory
    /// (about 0.5 KiB per route), as in earlier versions of this bench.
    Fake,
    /// `--cloud-provider=hcloud` against the Hetzner double in this process, every
    /// route already in the network: the cloud out of process, as in a real cluster.
    Hcloud,
}

impl BenchCloud {
    fn label(self) -> &'static str {
        match self {
            BenchCloud::Hcloud => "hcloud double (out of process)",
            BenchCloud::Fake => "fake cloud (in process)",
        }
    }

    fn provider_id(self, i: usize) -> String {
        match self {
            BenchCloud::Fake => format!("fake://{i}"),
            BenchCloud::Hcloud => format!("hcloud://{}", i + 1),
        }
    }

    /// The fake cloud's pod CIDRs start at 10.0.0.0/24; Hetzner's must lie outside the
    /// servers' subnet (10.0.0.0/16), so they start at 10.16.0.0/24.
    fn pod_cidr(self, i: usize) -> String {
        match self {
            BenchCloud::Fake => pod_cidr(i),
            BenchCloud::Hcloud => format!("10.{}.{}.0/24", 16 + (i >> 8), i & 255),
        }
    }
}

/// What one run of the controller measured.
struct RssSample {
    /// VmHWM when the first pass after the initial list has finished, KiB.
    peak: u64,
    /// VmRSS two seconds after that, KiB.
    synced: u64,
    /// VmHWM over a relist (the peak reset after sync), KiB; 0 if it did not finish.
    relist: u64,
    took: Duration,
}

fn rss() {
    let runs: usize = std::env::var("RC_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    println!(
        "\n[rss] RSS of `route-controller run` in watch mode with N nodes, commit {}, {runs} run(s) (range):",
        commit()
    );
    println!(
        "      nodes served by a minimal API server in this process ({:.1} KiB of JSON per node, pages of 500);",
        node_json(0, 1).len() as f64 / 1024.0
    );
    println!(
        "      peak = VmHWM at sync (first pass done), steady = VmRSS 2 s later, relist = VmHWM over a relist \
         forced by a 410, whose pass lists the cloud again (peak reset at steady)"
    );
    println!("      allocator: {}", allocator_summary());
    // RC_BENCH_NODES=5000 measures one size; RC_BENCH_CLOUDS=hcloud one cloud;
    // RC_BENCH_WRAPPER="valgrind --tool=massif" runs the binary under a profiler.
    let sizes: Vec<usize> = match std::env::var("RC_BENCH_NODES") {
        Ok(v) => v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![0, 5_000, 50_000],
    };
    let clouds: Vec<BenchCloud> = std::env::var("RC_BENCH_CLOUDS")
        .unwrap_or_else(|_| "hcloud,fake".into())
        .split(',')
        .filter_map(|c| match c.trim() {
            "hcloud" => Some(BenchCloud::Hcloud),
            "fake" => Some(BenchCloud::Fake),
            _ => None,
        })
        .collect();
    let builds = bench_builds();
    for cloud in clouds {
        for &build in &builds {
            println!("  {}, {} build:", cloud.label(), build.label());
            let binary = match build.binary() {
                Ok(b) => b,
                Err(e) => {
                    println!("         FAILED: {e}");
                    continue;
                }
            };
            rss_rows(&binary, cloud, &sizes, runs);
        }
    }
}

/// One build's rows of [`rss`]: each size `runs` times.
fn rss_rows(binary: &std::path::Path, cloud: BenchCloud, sizes: &[usize], runs: usize) {
    let binary = &binary.to_string_lossy();
    for &n in sizes {
        let mut samples = Vec::new();
        let mut failure = None;
        for _ in 0..runs {
            match measure_rss(binary, n, cloud) {
                Ok(s) => samples.push(s),
                Err(e) => failure = Some(e),
            }
        }
        if let Some(e) = failure {
            println!("  {n:>6} nodes: FAILED: {e}");
            continue;
        }
        let mib = |f: &dyn Fn(&RssSample) -> u64| {
            min_max(samples.iter().map(|s| f(s) as f64 / 1024.0).collect(), 1)
        };
        println!(
            "  {n:>6} nodes: peak {:>11} MiB, steady {:>11} MiB, relist {:>11} MiB, synced in {} s",
            mib(&|s| s.peak),
            mib(&|s| s.synced),
            mib(&|s| s.relist),
            min_max(samples.iter().map(|s| s.took.as_secs_f64()).collect(), 1)
        );
    }
}

/// The child's allocator settings: as the generated Deployment sets them
/// (`manifests::ALLOCATOR_ENV`), each unless the bench's own environment says
/// otherwise (`MALLOC_ARENA_MAX=0` is glibc's default, an arena per thread up to eight
/// per core; `MALLOC_MMAP_THRESHOLD_=0` maps every block, so glibc's default is to
/// leave it out: `MALLOC_MMAP_THRESHOLD_=` drops it).
pub(crate) fn allocator_env() -> Vec<(&'static str, String)> {
    ALLOCATOR_ENV
        .iter()
        .filter_map(|&(name, value, _)| match std::env::var(name) {
            Ok(set) if set.is_empty() => None,
            Ok(set) => Some((name, set)),
            Err(_) => Some((name, value.to_string())),
        })
        .collect()
}

/// [`allocator_env`] as printed: `NAME=value` each, and where it came from.
pub(crate) fn allocator_summary() -> String {
    let set: Vec<String> = allocator_env()
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    let from_env = ALLOCATOR_ENV
        .iter()
        .any(|(name, _, _)| std::env::var(name).is_ok());
    format!(
        "{} ({})",
        if set.is_empty() {
            "glibc's defaults".to_string()
        } else {
            set.join(" ")
        },
        if from_env {
            "the bench's environment changed what the generated Deployment sets"
        } else {
            "as `route-controller manifests` sets it"
        }
    )
}

/// `min–max` of `values` with `decimals` places, or one number if they round alike.
fn min_max(values: Vec<f64>, decimals: usize) -> String {
    let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (a, b) = (format!("{min:.decimals$}"), format!("{max:.decimals$}"));
    if a == b { a } else { format!("{a}–{b}") }
}

/// The Hetzner project of the bench: one network, a server per node and every route
/// in place, so that no create (one per second at Hetzner) is needed.
fn hetzner_for(nodes: usize) -> hcloud_double::HcloudDouble {
    let double = hcloud_double::HcloudDouble::start(&e2e_hcloud::token("bench"));
    double.add_network(
        e2e_hcloud::NETWORK,
        "k8s",
        e2e_hcloud::IP_RANGE,
        &[e2e_hcloud::SUBNET],
    );
    double.set_route_limit(nodes + 100);
    for i in 0..nodes {
        let id = i as u64 + 1;
        let ip = e2e_hcloud::server_ip(id);
        double.add_server(id, &format!("node-{i}"), Some((e2e_hcloud::NETWORK, &ip)));
        double.put_route(e2e_hcloud::NETWORK, &BenchCloud::Hcloud.pod_cidr(i), &ip);
    }
    double
}

fn measure_rss(binary: &str, nodes: usize, cloud: BenchCloud) -> Result<RssSample, String> {
    let server = NodeServer::start(nodes, cloud).map_err(|e| format!("node server: {e}"))?;
    let hetzner = (cloud == BenchCloud::Hcloud).then(|| hetzner_for(nodes));
    let cloud_env: Vec<(&str, String)> = match &hetzner {
        Some(double) => vec![
            ("HCLOUD_TOKEN", double.token().to_string()),
            ("HCLOUD_NETWORK", e2e_hcloud::NETWORK.to_string()),
            ("HCLOUD_ENDPOINT", double.endpoint()),
            ("HCLOUD_NETWORK_ROUTE_LIMIT", (nodes + 100).to_string()),
        ],
        None => Vec::new(),
    };
    let metrics_port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let home = std::env::temp_dir().join(format!("rc-bench-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).map_err(|e| e.to_string())?;
    let wrapper: Vec<String> = std::env::var("RC_BENCH_WRAPPER")
        .map(|w| w.split_whitespace().map(String::from).collect())
        .unwrap_or_default();
    let (program, pre_args) = match wrapper.split_first() {
        Some((p, rest)) => (p.clone(), [rest, &[binary.to_string()]].concat()),
        None => (binary.to_string(), Vec::new()),
    };
    let mut child = std::process::Command::new(program)
        .args(pre_args)
        .args([
            "run",
            match cloud {
                BenchCloud::Fake => "--cloud-provider=fake",
                BenchCloud::Hcloud => "--cloud-provider=hcloud",
            },
            "--cluster-cidr=10.0.0.0/8",
            "--leader-elect=false",
            "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true",
            &format!("--master=http://127.0.0.1:{}", server.port),
            &format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            // The secure port's default is fixed; the bench scrapes the plain one.
            "--secure-port=0",
            // In a cluster a relist comes hours after the last list of the cloud, so
            // the relist's pass lists the routes again: so it does here.
            "--route-list-max-age=1s",
        ])
        .args(
            std::env::var("RC_BENCH_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .env_clear()
        .env("HOME", &home)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .envs(cloud_env)
        .envs(allocator_env())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let pid = child.id();
    let result = (|| {
        wait_for_first_pass(&mut child, metrics_port, start)?;
        let took = start.elapsed();
        let peak = proc_status(pid, "VmHWM:")?;
        std::thread::sleep(Duration::from_secs(2));
        let synced = proc_status(pid, "VmRSS:")?;
        // Reset the peak to the current RSS, then have the watch answered 410: the
        // controller lists every node again.
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
            .map_err(|e| format!("resetting VmHWM: {e}"))?;
        server.gone.store(true, Ordering::Relaxed);
        wait_for_relist(&mut child, metrics_port, start)?;
        std::thread::sleep(Duration::from_secs(1));
        let relist = proc_status(pid, "VmHWM:")?;
        Ok(RssSample {
            peak,
            synced,
            relist,
            took,
        })
    })();
    // SIGTERM, so that a profiler wrapping the binary writes its output.
    let _ = std::process::Command::new("kill")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    server.stop();
    drop(hetzner);
    let _ = std::fs::remove_dir_all(&home);
    result
}

/// Waits until the controller is ready and has finished a pass.
fn wait_for_first_pass(
    child: &mut std::process::Child,
    metrics_port: u16,
    start: Instant,
) -> Result<(), String> {
    loop {
        check_alive(child, start)?;
        if http_get(metrics_port, "/readyz").is_some_and(|(code, _)| code == 200) {
            // Let the first pass (50 000 routes) finish.
            let (_, metrics) = http_get(metrics_port, "/metrics").unwrap_or_default();
            if metrics
                .lines()
                .any(|l| l.starts_with("route_controller_route_sync_total{") && !l.ends_with(" 0"))
            {
                return Ok(());
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the controller has listed the nodes a second time and planned a pass
/// on that list, which listed the cloud's routes again.
fn wait_for_relist(
    child: &mut std::process::Child,
    metrics_port: u16,
    start: Instant,
) -> Result<(), String> {
    loop {
        check_alive(child, start)?;
        let (_, text) = http_get(metrics_port, "/metrics").unwrap_or_default();
        let metrics = controller_process::prometheus::parse(&text).unwrap_or_default();
        let sum = |name, labels| controller_process::sum(&metrics, name, labels);
        let relists = sum("route_controller_watch_relists_total", &[]);
        let relist_passes = sum("route_controller_passes_total", &[("trigger", "relist")]);
        let cloud_lists = sum(
            "route_controller_cloud_requests_total",
            &[("operation", "list")],
        );
        if relists >= 2.0 && relist_passes >= 1.0 && cloud_lists >= 2.0 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn check_alive(child: &mut std::process::Child, start: Instant) -> Result<(), String> {
    if start.elapsed() > Duration::from_secs(600) {
        return Err("not done within 600 s".to_string());
    }
    match child.try_wait() {
        Ok(Some(status)) => Err(format!("exited early: {status}")),
        _ => Ok(()),
    }
}

/// A `/proc/PID/status` field in KiB.
fn proc_status(pid: u32, field: &str) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// Serves `GET /api/v1/nodes` in pages of 500 generated nodes, and watches that send a
/// bookmark every few seconds and otherwise stay quiet, until `gone` is set: then the
/// open watch ends with a 410 `ERROR` event (once), as a real server's does when its
/// history is compacted. A streaming list (`sendInitialEvents=true`) first sends every
/// node as ADDED and the end bookmark, as a 1.34+ API server does. Any other request
/// gets 200 {}.
struct NodeServer {
    port: u16,
    stop: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
}

impl NodeServer {
    fn start(nodes: usize, cloud: BenchCloud) -> std::io::Result<NodeServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let gone = Arc::new(AtomicBool::new(false));
        let (flag, expire) = (stop.clone(), gone.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (flag, expire) = (flag.clone(), expire.clone());
                std::thread::spawn(move || serve(stream, nodes, cloud, &flag, &expire));
            }
        });
        Ok(NodeServer { port, stop, gone })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(stream: TcpStream, nodes: usize, cloud: BenchCloud, stop: &AtomicBool, gone: &AtomicBool) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        let mut content_length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            if header == "\r\n" {
                break;
            }
            if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                content_length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; content_length];
        let _ = reader.read_exact(&mut body);
        let target = request.split_whitespace().nth(1).unwrap_or("/").to_string();
        if target.starts_with("/api/v1/nodes?") && target.contains("watch=1") {
            let _ = write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            );
            if target.contains("sendInitialEvents=true") {
                for i in 0..nodes {
                    let line = format!(
                        "{{\"type\":\"ADDED\",\"object\":{}}}\n",
                        node_json_in(cloud, i, 1000)
                    );
                    if write!(out, "{:x}\r\n{line}\r\n", line.len()).is_err() {
                        return;
                    }
                }
                let end = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1000\",\"annotations\":{\"k8s.io/initial-events-end\":\"true\"}}}}\n";
                if write!(out, "{:x}\r\n{end}\r\n", end.len()).is_err() {
                    return;
                }
            }
            let mut last = Instant::now() - Duration::from_secs(5);
            while !stop.load(Ordering::Relaxed) {
                let line = if gone.swap(false, Ordering::Relaxed) {
                    "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"reason\":\"Expired\",\"code\":410,\"message\":\"too old resource version\"}}\n"
                } else if last.elapsed() >= Duration::from_secs(5) {
                    last = Instant::now();
                    "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1000\"}}}\n"
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                if write!(out, "{:x}\r\n{line}\r\n", line.len()).is_err() || line.contains("ERROR")
                {
                    let _ = write!(out, "0\r\n\r\n");
                    return;
                }
            }
            return;
        }
        let body = if target.starts_with("/api/v1/nodes?") {
            let start: usize = target
                .split('&')
                .find_map(|kv| kv.strip_prefix("continue="))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let end = (start + 500).min(nodes);
            let items: Vec<String> = (start..end).map(|i| node_json_in(cloud, i, 1000)).collect();
            let next = if end < nodes {
                end.to_string()
            } else {
                String::new()
            };
            format!(
                "{{\"kind\":\"NodeList\",\"apiVersion\":\"v1\",\"metadata\":{{\"resourceVersion\":\"1000\",\"continue\":\"{next}\"}},\"items\":[{}]}}",
                items.join(",")
            )
        } else {
            "{}".to_string()
        };
        if write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .is_err()
        {
            return;
        }
    }
}

// --- 4. cloud calls per node change -------------------------------------------------

fn calls() {
    let runs = bench_runs();
    println!(
        "\n[calls] cloud calls per route mutation (the physical minimum is 1.00), simulate --seed 1, \
         range over {runs} run(s) (virtual time: a run that differs is a bug):"
    );
    println!(
        "  {:<16} {:>10} {:>16} {:>10}",
        "scenario", "poll", "upstream-watch", "watch"
    );
    for scenario in [
        Scenario::RollingUpgrade,
        Scenario::ScaleOut,
        Scenario::FlakyCloud,
        Scenario::AddressChurn,
    ] {
        let options = SimOptions {
            scenario,
            nodes: None,
            duration: None,
            seed: 1,
            latency: Duration::from_millis(100),
        };
        let mut ratios: [Vec<f64>; 3] = Default::default();
        for _ in 0..runs {
            let report = sim::run(&options, &mut |_| {});
            let modes = ["poll", "upstream-watch", Mode::Watch.as_str()];
            for (mode, ratios) in modes.iter().zip(ratios.iter_mut()) {
                let m = report.modes.iter().find(|m| m.mode == *mode).expect("mode");
                ratios.push(m.cloud_calls.total() as f64 / m.route_mutations.max(1) as f64);
            }
        }
        println!(
            "  {:<16} {:>10} {:>16} {:>10}",
            scenario.name(),
            range(&ratios[0], 2),
            range(&ratios[1], 2),
            range(&ratios[2], 2)
        );
    }
}

/// The time `route-controller simulate` takes, the binary run as a user runs it: the
/// default (every scenario) and each scenario alone, wall and CPU (user + system, of
/// the finished child), each a range over `RC_BENCH_RUNS` runs. Issue 39's bound: the
/// default run within 10 s of wall time on a 2-core machine.
fn simulate() {
    let runs = bench_runs();
    println!(
        "\n[simulate] route-controller simulate --seed 1, the whole process, range over {runs} run(s):"
    );
    println!("  {:<24} {:>16} {:>16}", "scenario", "wall s", "cpu s");
    let scenarios = std::iter::once("all").chain(Scenario::ALL.iter().map(|s| s.name()));
    for scenario in scenarios {
        let (mut wall, mut cpu) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let (w, c) = time_child(
                std::process::Command::new(env!("CARGO_BIN_EXE_route-controller")).args([
                    "simulate",
                    "--scenario",
                    scenario,
                ]),
            );
            wall.push(w);
            cpu.push(c);
        }
        println!(
            "  {:<24} {:>16} {:>16}",
            scenario,
            range(&wall, 2),
            range(&cpu, 2)
        );
    }
}

/// Runs `command` to its end with its output thrown away; its wall seconds and the CPU
/// seconds (user + system) the system accounted to it, read from getrusage of the
/// children before and after.
fn time_child(command: &mut std::process::Command) -> (f64, f64) {
    let before = children_cpu();
    let started = Instant::now();
    let status = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run route-controller");
    let wall = started.elapsed().as_secs_f64();
    assert!(
        status.success(),
        "route-controller simulate failed: {status}"
    );
    (wall, children_cpu() - before)
}

/// CPU seconds of the waited-for children so far, from /proc/self/stat (cutime and
/// cstime, in clock ticks of 1/100 s on Linux).
fn children_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
    // The fields after the command name (which may hold spaces) start after ") ".
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or("", |(_, rest)| rest)
        .split(' ')
        .collect();
    // cutime and cstime are fields 16 and 17 of stat(5); what follows the name starts
    // at field 3.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(13) + ticks(14)) / 100.0
}

// --- 5. upstream's real controller beside ours ---------------------------------------

/// The scenario, in real time from the moment the controller's node informer has
/// synced: 20 nodes whose routes the controller creates at start, then 8 of them
/// replaced one every 4 s (delete; 1 s later create the replacement with a new pod
/// CIDR), then quiet. It starts 12.5 s in, after the start-up passes of every mode,
/// and off the 10 s poll grid, so that no change lands on a poll tick.
fn upstream_scenario() -> sim::Replacement {
    sim::Replacement {
        nodes: 20,
        replaced: 8,
        first: Duration::from_millis(12_500),
        spacing: Duration::from_secs(4),
        replace_after: Duration::from_secs(1),
        duration: Duration::from_millis(56_500),
        latency: Duration::from_millis(100),
        seed: 1,
    }
}

const UPSTREAM_CLUSTER_CIDR: &str = "10.0.0.0/8";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Implementation {
    Upstream,
    Ours,
}

/// What one run measured.
struct Measured {
    /// Before the first deletion: creating the initial routes.
    startup_calls: sim::CloudCalls,
    startup_passes: u64,
    /// From the first deletion on.
    calls: sim::CloudCalls,
    passes: u64,
    /// Node created (the API server's answer) to its route created in the cloud,
    /// per replacement node that got its route.
    node_to_route: Vec<Duration>,
    /// Replacement nodes without a route at the end.
    missing: usize,
    /// Node writes by the controller from the first deletion on (`MODIFIED` watch
    /// events: the script only adds and deletes nodes), i.e. condition patches.
    node_writes: usize,
    /// From ready (informer synced) to every initial node marked NetworkUnavailable=False.
    startup: Duration,
}

fn upstream() {
    let scenario = upstream_scenario();
    let version = upstream_version();
    println!(
        "\n[upstream] upstream's route controller ({version}) and ours, one at a time against one real \
         kube-apiserver;"
    );
    println!(
        "  fake clouds answering in {} ms. {} nodes; from {:.1} s after the node informer synced, {} of them are",
        scenario.latency.as_millis(),
        scenario.nodes,
        scenario.first.as_secs_f64(),
        scenario.replaced
    );
    println!(
        "  replaced one every {:.0} s (delete; {:.0} s later create the replacement with a new pod CIDR); the run ends at {:.1} s.",
        scenario.spacing.as_secs_f64(),
        scenario.replace_after.as_secs_f64(),
        scenario.duration.as_secs_f64()
    );
    let started = Instant::now();
    let harness = kube_apiserver::harness_binary();
    let controller = kube_apiserver::upstream_route_controller_binary();
    println!(
        "  Go programs ready in {:.1} s (built unless cached): {}, {}",
        started.elapsed().as_secs_f64(),
        harness.display(),
        controller.display()
    );
    let started = Instant::now();
    let api = kube_apiserver::KubeApiserver::start_fresh();
    println!(
        "  kube-apiserver ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let dir = kube_apiserver::scratch_dir("bench-upstream");
    let runs = bench_runs();
    let peers = [
        (Implementation::Upstream, false),
        (Implementation::Ours, false),
        (Implementation::Upstream, true),
        (Implementation::Ours, true),
    ];
    let mutations = 2 * scenario.replaced as u64;
    let mut measured: Vec<(Implementation, bool, Vec<UpstreamRun>)> =
        peers.iter().map(|&(i, w)| (i, w, Vec::new())).collect();
    let mut failed = false;
    for round in 1..=runs {
        for (implementation, watch, results) in measured.iter_mut() {
            let label = format!(
                "{} {}",
                match implementation {
                    Implementation::Upstream => "upstream",
                    Implementation::Ours => "ours",
                },
                if *watch { "watch" } else { "poll" }
            );
            let run_dir = dir.join(format!("{round}-{}", label.replace(' ', "-")));
            let started = Instant::now();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                measure_real(&api, &scenario, *implementation, *watch, &run_dir)
            }));
            let result = result.map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".to_string())
            });
            match &result {
                Ok(m) => println!(
                    "  round {round} ran {label:<14} in {:.0} s (initial routes and conditions {:.2} s after ready)",
                    started.elapsed().as_secs_f64(),
                    m.startup.as_secs_f64()
                ),
                Err(e) => {
                    failed = true;
                    println!("  round {round} {label}: FAILED: {e}");
                }
            }
            results.push(result.map(|m| UpstreamFigures::measured(&m, mutations)));
        }
    }
    drop(api);

    println!(
        "\n  \"start-up\": from ready to the first deletion (creating the {} initial routes), and from ready to every \
         initial\n  node's condition written (\"ready s\"); \"scripted\": from the first deletion to the end \
         ({mutations} route mutations).\n  \"writes\": node writes by the controller (condition patches) in the \
         scripted part. \"emulation\": the same timeline\n  in `route_controller::sim`. Ranges are min–max over \
         {runs} run(s).",
        scenario.nodes
    );
    println!(
        "  {:<26} {:^31} {:^44} {:^23}",
        "", "start-up", "scripted", "node→route s"
    );
    let mut header = format!("  {:<26}", "controller, mode");
    for (name, width, _) in UPSTREAM_COLUMNS {
        header += &format!(" {name:>width$}");
    }
    println!("{header}");
    let row = |label: &str, runs: &[UpstreamRun]| {
        let ok: Vec<&UpstreamFigures> = runs.iter().filter_map(|r| r.as_ref().ok()).collect();
        let mut line = format!("  {label:<26}");
        for (column, (_, width, decimals)) in UPSTREAM_COLUMNS.iter().enumerate() {
            let values: Vec<f64> = ok.iter().filter_map(|f| f.0[column]).collect();
            line += &format!(" {:>width$}", range(&values, *decimals));
        }
        let failures = runs.len() - ok.len();
        if failures > 0 {
            line += &format!("  FAILED in {failures} of {} run(s)", runs.len());
        }
        println!("{line}");
    };
    let real_row = |implementation: Implementation, watch: bool| {
        let label = match implementation {
            Implementation::Upstream => format!("upstream {version}"),
            Implementation::Ours => "ours".to_string(),
        };
        let label = format!("{label}, {}", if watch { "watch" } else { "poll" });
        let results = measured
            .iter()
            .find(|(i, w, _)| *i == implementation && *w == watch)
            .map(|(_, _, r)| r.as_slice())
            .unwrap_or_default();
        row(&label, results);
    };
    // The emulation runs in virtual time: its runs agree, or the simulation has a bug.
    let sim_row = |mode: Mode| {
        let results: Vec<UpstreamRun> = (0..runs)
            .map(|_| {
                Ok(UpstreamFigures::emulated(
                    &sim::run_replacement(&scenario, mode),
                    mutations,
                ))
            })
            .collect();
        row(&format!("emulation, {}", mode.as_str()), &results);
    };
    real_row(Implementation::Upstream, false);
    real_row(Implementation::Ours, false);
    sim_row(Mode::Poll);
    real_row(Implementation::Upstream, true);
    sim_row(Mode::UpstreamWatch);
    real_row(Implementation::Ours, true);
    sim_row(Mode::Watch);
    if failed {
        println!("  logs of the runs are kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// One run's figures, or why it failed.
type UpstreamRun = Result<UpstreamFigures, String>;

/// The columns of the `upstream` table: header, width, decimals.
const UPSTREAM_COLUMNS: [(&str, usize, usize); 13] = [
    ("passes", 6, 0),
    ("list", 6, 0),
    ("create", 6, 0),
    ("ready s", 11, 2),
    ("passes", 6, 0),
    ("list", 6, 0),
    ("create", 6, 0),
    ("delete", 6, 0),
    ("calls/m", 15, 2),
    ("p50", 11, 2),
    ("max", 11, 2),
    ("missing", 7, 0),
    ("writes", 7, 0),
];

/// One run's row of the `upstream` table, in the order of `UPSTREAM_COLUMNS`; `None`
/// where the run cannot tell (the emulation writes no conditions, has no process start).
struct UpstreamFigures([Option<f64>; 13]);

impl UpstreamFigures {
    fn measured(m: &Measured, mutations: u64) -> UpstreamFigures {
        let (p50, max) = p50_max(&m.node_to_route);
        UpstreamFigures(Self::row(
            (m.startup_passes, m.startup_calls),
            Some(m.startup.as_secs_f64()),
            (m.passes, m.calls),
            mutations,
            (p50, max),
            m.missing,
            Some(m.node_writes),
        ))
    }

    fn emulated(r: &sim::ReplacementReport, mutations: u64) -> UpstreamFigures {
        let l = r.scripted.latency_seconds.node_to_route;
        UpstreamFigures(Self::row(
            (r.startup_passes, r.startup_calls),
            None,
            (r.scripted.passes, r.scripted.cloud_calls),
            mutations,
            (l.p50, l.max),
            r.scripted.unserved,
            None,
        ))
    }

    fn row(
        (startup_passes, startup): (u64, sim::CloudCalls),
        ready: Option<f64>,
        (passes, calls): (u64, sim::CloudCalls),
        mutations: u64,
        (p50, max): (f64, f64),
        missing: usize,
        writes: Option<usize>,
    ) -> [Option<f64>; 13] {
        [
            Some(startup_passes as f64),
            Some(startup.list as f64),
            Some(startup.create as f64),
            ready,
            Some(passes as f64),
            Some(calls.list as f64),
            Some(calls.create as f64),
            Some(calls.delete as f64),
            Some(calls.total() as f64 / mutations as f64),
            Some(p50),
            Some(max),
            Some(missing as f64),
            writes.map(|w| w as f64),
        ]
    }
}

/// `v0.37.2`: the cloud-provider version the Go module pins.
fn upstream_version() -> String {
    let go_mod =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube-apiserver/go.mod");
    std::fs::read_to_string(go_mod)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/cloud-provider v"))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|v| format!("v{v}"))
        .unwrap_or_else(|| "(version unknown)".to_string())
}

/// Nearest-rank median and the maximum, in seconds.
fn p50_max(samples: &[Duration]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    match sorted.last() {
        None => (0.0, 0.0),
        Some(max) => (
            sorted[sorted.len().div_ceil(2) - 1].as_secs_f64(),
            max.as_secs_f64(),
        ),
    }
}

fn bench_node_name(k: usize) -> String {
    format!("node-{k}")
}

/// Removes every node, then creates the scenario's initial ones (`node-0`, …), so that
/// each run starts from the same cluster with no conditions set.
fn reset_nodes(api: &kube_apiserver::KubeApiserver, nodes: usize) {
    api.delete("/api/v1/nodes");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !api.get_json("/api/v1/nodes")["items"]
        .as_array()
        .is_none_or(|items| items.is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "nodes still listed 30 s after deleting them all"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for k in 0..nodes {
        create_bench_node(api, k);
    }
}

fn create_bench_node(api: &kube_apiserver::KubeApiserver, k: usize) {
    let ip = format!("172.16.{}.{}", (k >> 8) & 255, k & 255);
    api.create_node(&bench_node_name(k), &[&pod_cidr(k)], &[("InternalIP", &ip)]);
}

/// Whether every node in `0..nodes` has NetworkUnavailable=False (both controllers
/// set it once a node's routes exist).
fn all_available(api: &kube_apiserver::KubeApiserver, nodes: usize) -> bool {
    let list = api.get_json("/api/v1/nodes");
    let available: std::collections::BTreeSet<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| {
            n["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "NetworkUnavailable" && c["status"] == "False")
        })
        .filter_map(|n| n["metadata"]["name"].as_str().map(String::from))
        .collect();
    (0..nodes).all(|k| available.contains(&bench_node_name(k)))
}

/// Watches nodes for `length` (plus a second), returning when each `MODIFIED` event
/// arrived.
fn watch_node_writes(
    api: &kube_apiserver::KubeApiserver,
    length: Duration,
) -> std::thread::JoinHandle<Vec<std::time::SystemTime>> {
    let rv = api.get_json("/api/v1/nodes")["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let path = format!(
        "/api/v1/nodes?watch=1&resourceVersion={rv}&timeoutSeconds={}",
        length.as_secs() + 1
    );
    let mut stream = api.watch(&path, api.admin_token(), length + Duration::from_secs(30));
    std::thread::spawn(move || {
        let mut writes = Vec::new();
        while let Some(event) = stream.next_event() {
            if event["type"] == "MODIFIED" {
                writes.push(std::time::SystemTime::now());
            }
        }
        writes
    })
}

/// A controller under measurement: upstream's Go program or our binary.
enum Running {
    Upstream(upstream_controller::UpstreamController),
    Ours(OursProcess),
}

/// One run: reset the cluster, start the controller, wait for the initial routes, play
/// the script in real time, stop, and count what happened from the first deletion on.
fn measure_real(
    api: &kube_apiserver::KubeApiserver,
    scenario: &sim::Replacement,
    implementation: Implementation,
    watch: bool,
    dir: &std::path::Path,
) -> Measured {
    reset_nodes(api, scenario.nodes);
    let (running, ready) = match implementation {
        Implementation::Upstream => {
            let mut options = upstream_controller::UpstreamOptions::new(
                api.admin_kubeconfig(),
                UPSTREAM_CLUSTER_CIDR,
            );
            options.watch = watch;
            options.cloud_latency = scenario.latency;
            let c = upstream_controller::UpstreamController::start(&options, dir);
            let ready = c.ready_at();
            (Running::Upstream(c), ready)
        }
        Implementation::Ours => {
            let (p, ready) = OursProcess::start(api, watch, scenario.latency, dir);
            (Running::Ours(p), ready)
        }
    };
    // The script's clock: `ready` as an Instant.
    let t0 = Instant::now()
        - std::time::SystemTime::now()
            .duration_since(ready)
            .unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !all_available(api, scenario.nodes) {
        assert!(
            Instant::now() < deadline,
            "the initial nodes were not all marked NetworkUnavailable=False within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let startup = t0.elapsed();
    let sleep_until = |at: Duration| {
        let target = t0 + at;
        let now = Instant::now();
        assert!(
            target >= now || now - target < Duration::from_millis(200),
            "the script fell behind by {:?}",
            now - target
        );
        if target > now {
            std::thread::sleep(target - now);
        }
    };

    let mut created_at = Vec::new();
    sleep_until(scenario.first - Duration::from_millis(100));
    let writes = watch_node_writes(api, scenario.duration - scenario.first);
    sleep_until(scenario.first);
    let before = match &running {
        Running::Ours(p) => p.counts(),
        Running::Upstream(_) => (sim::CloudCalls::default(), 0),
    };
    let window_start = std::time::SystemTime::now();
    for i in 0..scenario.replaced {
        let at = scenario.first + scenario.spacing * i as u32;
        sleep_until(at);
        api.delete(&format!("/api/v1/nodes/{}", bench_node_name(i)));
        sleep_until(at + scenario.replace_after);
        create_bench_node(api, scenario.nodes + i);
        created_at.push(std::time::SystemTime::now());
    }
    sleep_until(scenario.duration);
    let window_end = std::time::SystemTime::now();
    let node_writes = writes
        .join()
        .unwrap_or_else(|_| panic!("the node watch failed"))
        .into_iter()
        .filter(|at| *at >= window_start && *at < window_end)
        .count();

    let (startup_calls, startup_passes, calls, passes, routes) = match running {
        Running::Ours(p) => {
            let after = p.counts();
            let routes = p.stop();
            let calls = sim::CloudCalls {
                list: after.0.list - before.0.list,
                create: after.0.create - before.0.create,
                delete: after.0.delete - before.0.delete,
            };
            (before.0, before.1, calls, after.1 - before.1, routes)
        }
        Running::Upstream(c) => {
            let report = c.stop();
            let between = |from, to| sim::CloudCalls {
                list: report.calls_between("list", from, to),
                create: report.calls_between("create", from, to),
                delete: report.calls_between("delete", from, to),
            };
            let startup = between(std::time::UNIX_EPOCH, window_start);
            let calls = between(window_start, window_end);
            // Upstream lists once at the start of every reconcile.
            (startup, startup.list, calls, calls.list, report.routes)
        }
    };
    let mut node_to_route = Vec::new();
    let mut missing = 0;
    for (i, node_created) in created_at.iter().enumerate() {
        let k = scenario.nodes + i;
        match routes.get(&(bench_node_name(k), pod_cidr(k))) {
            Some(route_created) => node_to_route.push(
                route_created
                    .duration_since(*node_created)
                    .unwrap_or_default(),
            ),
            None => missing += 1,
        }
    }
    Measured {
        node_writes,
        startup_calls,
        startup_passes,
        calls,
        passes,
        node_to_route,
        missing,
        startup,
    }
}

/// Our binary, `route-controller run --cloud-provider=fake`, with the fake's latency
/// and route journal set through the environment.
struct OursProcess {
    child: std::process::Child,
    port: u16,
    journal: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl OursProcess {
    /// Starts the binary and returns once `/readyz` answers 200 (a complete node
    /// list), with that time.
    fn start(
        api: &kube_apiserver::KubeApiserver,
        watch: bool,
        latency: Duration,
        dir: &std::path::Path,
    ) -> (OursProcess, std::time::SystemTime) {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let journal = dir.join("journal.jsonl");
        let log = dir.join("route-controller.log");
        let _ = std::fs::remove_file(&journal);
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_route-controller"));
        command.args([
            "run",
            "--cloud-provider=fake",
            "--leader-elect=false",
            "--metrics-bind-address=127.0.0.1:0",
            "--secure-port=0",
            &format!("--cluster-cidr={UPSTREAM_CLUSTER_CIDR}"),
            &format!("--kubeconfig={}", api.admin_kubeconfig().display()),
        ]);
        if watch {
            command
                .arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true");
        }
        let mut child = command
            .env(
                "ROUTE_CONTROLLER_FAKE_LATENCY",
                format!("{}ms", latency.as_millis()),
            )
            .env("ROUTE_CONTROLLER_FAKE_JOURNAL", &journal)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start route-controller: {e}"));
        let stderr = child.stderr.take().expect("piped stderr");
        let mut log_file =
            std::fs::File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let marker = "serving /metrics, /healthz and /readyz on http://";
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log_file, "{line}");
                if let Some((_, address)) = line.split_once(marker)
                    && let Ok(address) = address.trim().parse::<std::net::SocketAddr>()
                {
                    let _ = port_tx.send(address.port());
                }
            }
        });
        let mut process = OursProcess {
            child,
            port: 0,
            journal,
            log,
        };
        process.port = port_rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!(
                    "route-controller logged no metrics address within 30 s; see {}",
                    process.log.display()
                )
            });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if http_get(process.port, "/readyz").is_some_and(|(code, _)| code == 200) {
                return (process, std::time::SystemTime::now());
            }
            assert!(
                Instant::now() < deadline,
                "route-controller not ready within 30 s; see {}",
                process.log.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Cloud calls by operation (all outcomes) and passes so far, from `/metrics`.
    fn counts(&self) -> (sim::CloudCalls, u64) {
        let (_, text) = http_get(self.port, "/metrics")
            .unwrap_or_else(|| panic!("GET /metrics on port {} failed", self.port));
        let exposition =
            prometheus::parse(&text).unwrap_or_else(|e| panic!("/metrics does not parse: {e}"));
        let by_operation = |op: &str| {
            exposition
                .family("route_controller_cloud_requests_total")
                .samples
                .iter()
                .filter(|s| s.labels.get("operation").map(String::as_str) == Some(op))
                .map(|s| s.value as u64)
                .sum()
        };
        let calls = sim::CloudCalls {
            list: by_operation("list"),
            create: by_operation("create"),
            delete: by_operation("delete"),
        };
        let passes = exposition
            .family("route_controller_route_sync_total")
            .samples
            .iter()
            .map(|s| s.value as u64)
            .sum();
        (calls, passes)
    }

    /// Stops the process (SIGTERM, then SIGKILL after 20 s) and reads the journal:
    /// when each route, `(node, CIDR)`, was created (the last time).
    fn stop(mut self) -> std::collections::BTreeMap<(String, String), std::time::SystemTime> {
        let _ = std::process::Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        read_fake_journal(&self.journal)
    }
}

/// The routes `--cloud-provider=fake` wrote to its journal
/// (`ROUTE_CONTROLLER_FAKE_JOURNAL`): when each `(node, CIDR)` was created, the last
/// time. A line still being written (no newline yet) is left for the next read.
fn read_fake_journal(
    journal: &std::path::Path,
) -> std::collections::BTreeMap<(String, String), std::time::SystemTime> {
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    let mut routes = std::collections::BTreeMap::new();
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{}: {e}: {line}", journal.display()));
        let (Some(node), Some(cidr), Some(nanos)) = (
            v["node"].as_str(),
            v["cidr"].as_str(),
            v["createdUnixNanos"].as_u64(),
        ) else {
            panic!("{}: unexpected line {line}", journal.display());
        };
        routes.insert(
            (node.to_string(), cidr.to_string()),
            std::time::UNIX_EPOCH + Duration::from_nanos(nanos),
        );
    }
    routes
}

impl Drop for OursProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// --- beside upstream with its real AWS provider, in EC2 requests ------------------------

/// The start-up and rolling-replacement script of `peers`.
const PEERS_SCRIPT: aws_peer::Script = aws_peer::Script {
    nodes: 50,
    replaced: 8,
    spacing: Duration::from_secs(4),
    replace_after: Duration::from_secs(1),
    settle: Duration::from_secs(12),
    idle: Duration::ZERO,
};

/// How much the idle run compresses time: the poll period (and our route list's
/// maximum age) divided by this, for both controllers alike. 10, not more: ours
/// refuses a `--route-reconciliation-period` under 1 s.
const PEERS_IDLE_COMPRESSION: u32 = 10;
const PEERS_IDLE: Duration = Duration::from_secs(30);

/// Upstream's route controller with cloud-provider-aws and ours with its AWS provider,
/// each in poll and in watch mode, one at a time against one real kube-apiserver and
/// one moto behind a counting proxy. `RC_BENCH_RUNS=N` repeats everything N times and
/// prints each figure's range.
fn peers() {
    let runs = bench_runs();
    let s = PEERS_SCRIPT;
    println!(
        "\n[peers] upstream's route controller {} with cloud-provider-aws {} and ours, one at a time, \
         against one real kube-apiserver and moto behind a counting proxy ({runs} run(s)).",
        upstream_version(),
        go_module_version("k8s.io/cloud-provider-aws")
    );
    let idle_timing = aws_peer::Timing::compressed(PEERS_IDLE_COMPRESSION);
    print_peers_script("delete", &idle_timing);
    let started = Instant::now();
    kube_apiserver::harness_binary();
    kube_apiserver::aws_route_controller_binary();
    println!(
        "  Go programs ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let (moto, api) = std::thread::scope(|scope| {
        let moto = scope.spawn(moto::Moto::start);
        let api = kube_apiserver::KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let mut cluster = aws_peer::Cluster::create(&moto, s.nodes + s.replaced);
    // EC2's per-action buckets between the counting proxy and moto, for both alike:
    // full at each controller's start, as an idle account's are.
    let moto_addr: std::net::SocketAddr = moto
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("moto's address");
    let ec2_limits = http_fault::HttpFaultLayer::start(moto_addr);
    let proxy = aws_peer::Ec2Proxy::start(&format!("http://{}", ec2_limits.addr()));
    let dir = kube_apiserver::scratch_dir("bench-peers");
    let peers = [
        aws_peer::Peer::Upstream { watch: false },
        aws_peer::Peer::Ours { watch: false },
        aws_peer::Peer::Upstream { watch: true },
        aws_peer::Peer::Ours { watch: true },
    ];
    let mut results: Vec<(
        aws_peer::Peer,
        Vec<aws_peer::PeerRun>,
        Vec<aws_peer::PeerRun>,
    )> = peers.iter().map(|p| (*p, Vec::new(), Vec::new())).collect();
    // RequestLimitExceeded answers per peer and run, start-up and rolling.
    let mut throttled: Vec<Vec<usize>> = vec![Vec::new(); peers.len()];
    let idle_script = aws_peer::Script {
        replaced: 0,
        idle: PEERS_IDLE,
        ..s
    };
    for round in 0..runs {
        for (k, (peer, rolling, idle)) in results.iter_mut().enumerate() {
            let label = peer.label();
            let run_dir = dir.join(format!("{round}-{}", label.replace([' ', ',', '+'], "-")));
            let t = Instant::now();
            ec2_limits.ec2_buckets(http_fault::EC2_BUCKETS);
            let throttled_before = ec2_limits.throttled().len();
            let r = aws_peer::run_peer(
                *peer,
                &api,
                &mut cluster,
                &proxy,
                s,
                aws_peer::Timing::defaults(),
                &run_dir.join("rolling"),
            );
            throttled[k].push(ec2_limits.throttled().len() - throttled_before);
            ec2_limits.ec2_buckets(http_fault::EC2_BUCKETS);
            let i = aws_peer::run_peer(
                *peer,
                &api,
                &mut cluster,
                &proxy,
                idle_script,
                idle_timing,
                &run_dir.join("idle"),
            );
            println!(
                "  round {} {label:<20} {:.0} s: start-up {:.2} s [{}] rolling [{}] idle [{}]",
                round + 1,
                t.elapsed().as_secs_f64(),
                r.startup.as_secs_f64(),
                aws_peer::by_action(&r.startup_requests),
                aws_peer::by_action(&r.rolling_requests),
                aws_peer::by_action(&i.idle_requests)
            );
            rolling.push(r);
            idle.push(i);
        }
    }
    drop(proxy);
    drop(ec2_limits);

    let per_hour = 3600.0 / (PEERS_IDLE.as_secs_f64() * f64::from(PEERS_IDLE_COMPRESSION));
    println!(
        "\n  EC2 requests (all actions), from the proxy. start-up: process start to the last initial route; \
         rolling: {} route\n  mutations ({} creates, {} deletes); node→route: node created to moto's answer \
         to its CreateRoute; CPU and peak RSS of\n  the controller process over start-up and rolling; \
         RequestLimitExceeded: answers of EC2's per-action\n  buckets (tests/support/http_fault.rs) over \
         start-up and rolling. Ranges are min–max over the runs.",
        2 * s.replaced,
        s.replaced,
        s.replaced
    );
    println!(
        "  {:<20} {:>9} {:>12} {:>9} {:>14} {:>16} {:>11} {:>9} {:>12} {:>21}",
        "controller, mode",
        "start-up",
        "start-up s",
        "rolling",
        "per mutation",
        "node→route p50",
        "max",
        "CPU s",
        "RSS MiB",
        "RequestLimitExceeded"
    );
    for ((peer, rolling, idle), throttled) in results.iter().zip(&throttled) {
        let range = |values: Vec<f64>, decimals: usize| range(&values, decimals);
        let of =
            |f: &dyn Fn(&aws_peer::PeerRun) -> f64, d| range(rolling.iter().map(f).collect(), d);
        let mutations = (2 * s.replaced) as f64;
        println!(
            "  {:<20} {:>9} {:>12} {:>9} {:>14} {:>16} {:>11} {:>9} {:>12} {:>21}",
            peer.label(),
            of(&|r| aws_peer::total(&r.startup_requests) as f64, 0),
            of(&|r| r.startup.as_secs_f64(), 2),
            of(&|r| aws_peer::total(&r.rolling_requests) as f64, 0),
            of(
                &|r| aws_peer::total(&r.rolling_requests) as f64 / mutations,
                2
            ),
            of(&|r| aws_peer::p50_max(&r.node_to_route).0, 2),
            of(&|r| aws_peer::p50_max(&r.node_to_route).1, 2),
            of(&|r| r.cpu_seconds, 2),
            of(&|r| r.peak_rss_mib, 1),
            range(throttled.iter().map(|&t| t as f64).collect(), 0),
        );
        let missing: usize = rolling.iter().map(|r| r.missing).sum();
        if missing > 0 {
            println!("  {:<20} {missing} replacement routes never created", "");
        }
        let idle_total = range(
            idle.iter()
                .map(|r| aws_peer::total(&r.idle_requests) as f64)
                .collect(),
            0,
        );
        let idle_hour = range(
            idle.iter()
                .map(|r| aws_peer::total(&r.idle_requests) as f64 * per_hour)
                .collect(),
            0,
        );
        println!(
            "  {:<20} idle: {idle_total} requests in {} s = {idle_hour} per idle hour; CPU {} s, RSS {} MiB; \
             last run: {}",
            "",
            PEERS_IDLE.as_secs(),
            range(idle.iter().map(|r| r.cpu_seconds).collect(), 2),
            range(idle.iter().map(|r| r.peak_rss_mib).collect(), 1),
            idle.last()
                .map(|r| aws_peer::by_action(&r.idle_requests))
                .unwrap_or_default()
        );
        if let Some(last) = rolling.last() {
            println!(
                "  {:<20} last run by action: start-up [{}]; rolling [{}]",
                "",
                aws_peer::by_action(&last.startup_requests),
                aws_peer::by_action(&last.rolling_requests)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// --- beside upstream with its real GCE provider, in Compute API requests ----------------

/// How long the double takes to finish a route's operation in `peers-gce` (GCE's take
/// seconds; both controllers wait on the same ones).
const PEERS_GCE_OPERATION: Duration = Duration::from_secs(2);

/// The peers' script (`PEERS_SCRIPT` and the idle window), as both parts print it;
/// `removal` says what a replacement removes first.
fn print_peers_script(removal: &str, idle_timing: &aws_peer::Timing) {
    let s = PEERS_SCRIPT;
    println!(
        "  start-up: {} nodes; rolling: {} replaced one every {} s ({removal}; {} s later the \
         replacement with a new pod CIDR), {} s settle;",
        s.nodes,
        s.replaced,
        s.spacing.as_secs(),
        s.replace_after.as_secs(),
        s.settle.as_secs()
    );
    println!(
        "  idle: a separate start with every route in place, then {} s with the poll period {} times shorter \
         ({:.1} s; our route list max age {} s): {} min of an idle cluster; per hour = × {}.",
        PEERS_IDLE.as_secs(),
        PEERS_IDLE_COMPRESSION,
        idle_timing.poll_period.as_secs_f64(),
        idle_timing.route_list_max_age.as_secs(),
        PEERS_IDLE.as_secs() * u64::from(PEERS_IDLE_COMPRESSION) / 60,
        3600 / (PEERS_IDLE.as_secs() * u64::from(PEERS_IDLE_COMPRESSION))
    );
}

/// Upstream's route controller with cloud-provider-gcp and ours with its GCE provider,
/// each in poll and in watch mode, one at a time against one real kube-apiserver and
/// one Compute double that counts every request by method; the script of `peers`.
/// `RC_BENCH_RUNS=N` repeats everything N times and prints each figure's range.
fn peers_gce() {
    let runs = bench_runs();
    let s = PEERS_SCRIPT;
    println!(
        "\n[peers-gce] upstream's route controller {} with cloud-provider-gcp {} and ours, one at a time, \
         against one real kube-apiserver and the Compute double ({runs} run(s)).",
        upstream_version(),
        go_module_version("k8s.io/cloud-provider-gcp/providers")
    );
    println!(
        "  one gce.conf for both (api-endpoint and token-url on the double, multizone over {} zones, nodes \
         spread over them in order); every route operation takes {} s;",
        gce_double::ZONES.len(),
        PEERS_GCE_OPERATION.as_secs_f64()
    );
    let idle_timing = aws_peer::Timing::compressed(PEERS_IDLE_COMPRESSION);
    print_peers_script("instance and node deleted", &idle_timing);
    let started = Instant::now();
    kube_apiserver::harness_binary();
    kube_apiserver::gcp_route_controller_binary();
    println!(
        "  Go programs ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let api = kube_apiserver::KubeApiserver::start_fresh();
    let cluster = gce_peer::GceCluster::create(s.nodes + s.replaced, PEERS_GCE_OPERATION);
    let dir = kube_apiserver::scratch_dir("bench-peers-gce");
    let peers = [
        gce_peer::GcePeer::Upstream { watch: false },
        gce_peer::GcePeer::Ours { watch: false },
        gce_peer::GcePeer::Upstream { watch: true },
        gce_peer::GcePeer::Ours { watch: true },
    ];
    type Runs = Vec<aws_peer::PeerRun>;
    let mut results: Vec<(gce_peer::GcePeer, Runs, Runs)> =
        peers.iter().map(|p| (*p, Vec::new(), Vec::new())).collect();
    let idle_script = aws_peer::Script {
        replaced: 0,
        idle: PEERS_IDLE,
        ..s
    };
    for round in 0..runs {
        for (peer, rolling, idle) in results.iter_mut() {
            let label = peer.label();
            let run_dir = dir.join(format!("{round}-{}", label.replace([' ', ',', '+'], "-")));
            let t = Instant::now();
            let r = gce_peer::run_gce_peer(
                *peer,
                &api,
                &cluster,
                s,
                aws_peer::Timing::defaults(),
                &run_dir.join("rolling"),
            );
            let i = gce_peer::run_gce_peer(
                *peer,
                &api,
                &cluster,
                idle_script,
                idle_timing,
                &run_dir.join("idle"),
            );
            println!(
                "  round {} {label:<20} {:.0} s: start-up {:.2} s [{}] rolling [{}] idle [{}]",
                round + 1,
                t.elapsed().as_secs_f64(),
                r.startup.as_secs_f64(),
                aws_peer::by_action(&r.startup_requests),
                aws_peer::by_action(&r.rolling_requests),
                aws_peer::by_action(&i.idle_requests)
            );
            rolling.push(r);
            idle.push(i);
        }
    }

    let per_hour = 3600.0 / (PEERS_IDLE.as_secs_f64() * f64::from(PEERS_IDLE_COMPRESSION));
    println!(
        "\n  Compute API requests (every method, token endpoints included), from the double's log. start-up: \
         process start to the\n  last initial route in place (its operation done); rolling: {} route mutations \
         ({} creates, {} deletes); node→route: node\n  created to its route in place; CPU and peak RSS of the \
         controller process over start-up and rolling. Ranges are min–max over the runs.",
        2 * s.replaced,
        s.replaced,
        s.replaced
    );
    println!(
        "  {:<20} {:>9} {:>12} {:>9} {:>14} {:>16} {:>11} {:>9} {:>12}",
        "controller, mode",
        "start-up",
        "start-up s",
        "rolling",
        "per mutation",
        "node→route p50",
        "max",
        "CPU s",
        "RSS MiB"
    );
    for (peer, rolling, idle) in &results {
        let of = |f: &dyn Fn(&aws_peer::PeerRun) -> f64, d| {
            range(&rolling.iter().map(f).collect::<Vec<_>>(), d)
        };
        let mutations = (2 * s.replaced) as f64;
        let method =
            |r: &aws_peer::PeerRun, m: &str| *r.rolling_requests.get(m).unwrap_or(&0) as f64;
        println!(
            "  {:<20} {:>9} {:>12} {:>9} {:>14} {:>16} {:>11} {:>9} {:>12}",
            peer.label(),
            of(&|r| aws_peer::total(&r.startup_requests) as f64, 0),
            of(&|r| r.startup.as_secs_f64(), 2),
            of(&|r| aws_peer::total(&r.rolling_requests) as f64, 0),
            of(
                &|r| aws_peer::total(&r.rolling_requests) as f64 / mutations,
                2
            ),
            of(&|r| aws_peer::p50_max(&r.node_to_route).0, 2),
            of(&|r| aws_peer::p50_max(&r.node_to_route).1, 2),
            of(&|r| r.cpu_seconds, 2),
            of(&|r| r.peak_rss_mib, 1),
        );
        println!(
            "  {:<20} rolling per mutation: waits {}, routes.list {}; instances.get per create {}",
            "",
            of(&|r| method(r, "globalOperations.wait") / mutations, 2),
            of(&|r| method(r, "routes.list") / mutations, 2),
            of(&|r| method(r, "instances.get") / s.replaced as f64, 2),
        );
        let missing: usize = rolling.iter().map(|r| r.missing).sum();
        if missing > 0 {
            println!("  {:<20} {missing} replacement routes never created", "");
        }
        let idle_of = |f: &dyn Fn(&aws_peer::PeerRun) -> f64, d| {
            range(&idle.iter().map(f).collect::<Vec<_>>(), d)
        };
        println!(
            "  {:<20} idle: {} requests in {} s = {} per idle hour; CPU {} s, RSS {} MiB; last run: {}",
            "",
            idle_of(&|r| aws_peer::total(&r.idle_requests) as f64, 0),
            PEERS_IDLE.as_secs(),
            idle_of(&|r| aws_peer::total(&r.idle_requests) as f64 * per_hour, 0),
            idle_of(&|r| r.cpu_seconds, 2),
            idle_of(&|r| r.peak_rss_mib, 1),
            idle.last()
                .map(|r| aws_peer::by_action(&r.idle_requests))
                .unwrap_or_default()
        );
        if let Some(last) = rolling.last() {
            println!(
                "  {:<20} last run by method: start-up [{}]; rolling [{}]",
                "",
                aws_peer::by_action(&last.startup_requests),
                aws_peer::by_action(&last.rolling_requests)
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The version of a module that tests/kube-apiserver/go.mod requires (`v1.37.1`).
fn go_module_version(module: &str) -> String {
    let go_mod =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kube-apiserver/go.mod");
    std::fs::read_to_string(go_mod)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(&format!("{module} "))
                .map(str::to_string)
        })
        .and_then(|rest| rest.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "(version unknown)".to_string())
}
