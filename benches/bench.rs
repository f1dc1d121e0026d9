//! Benchmarks: `cargo bench`. They print numbers; nothing here asserts a time.
//!
//! 1. Watch events decoded and filtered per second, on realistic node JSON (image
//!    lists, managed fields, conditions): the watch's line decoder plus the
//!    controller's trigger filter, as the node watch thread and the actor run them.
//! 2. Planner time at 5 000 and 50 000 nodes.
//! 3. Peak RSS of `route-controller run --cloud-provider fake` with 5 000 and 50 000
//!    nodes served by a minimal API server in this process.
//! 4. Cloud calls per node change in each simulated scenario, per mode.
//!
//! `cargo bench -- NAME` runs only the parts whose name contains NAME (`events`,
//! `planner`, `rss`, `calls`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use route_controller::controller::{Config, Controller, Input, Mode, NodeEvent};
use route_controller::kube::WatchConfig;
use route_controller::kube::watch::{LineOutcome, Reflector};
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, Node, NodeAddress, NodeList, Route};
use route_controller::plan;
use route_controller::sim::{self, Scenario, SimOptions};

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    println!(
        "route-controller benchmarks ({} build)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
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
}

// --- realistic node JSON -------------------------------------------------------------

/// A node as a kubelet reports it: 40 images with digests, managed fields, the usual
/// conditions, labels and annotations. About 12 KiB of JSON.
fn node_json(i: usize, rv: u64) -> String {
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
        "spec": {"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)], "providerID": format!("fake://{i}")},
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
    let mut config = Config::new(vec![Cidr::parse("10.0.0.0/8").unwrap()]);
    config.seed = Some(1);
    let mut controller = Controller::new(config, Arc::new(Metrics::new()));
    let now = Instant::now();
    controller.handle(Input::Node(NodeEvent::Init), now);
    for i in 0..nodes {
        let node: Node = serde_json::from_str(&node_json(i, 999)).unwrap();
        controller.handle(Input::Node(NodeEvent::InitApply(node)), now);
    }
    controller.handle(Input::Node(NodeEvent::InitDone), now);
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
    let mut forwarded = 0u64;
    for line in &lines {
        if let LineOutcome::Event(event) = reflector.on_watch_line(line.as_bytes(), now) {
            forwarded += 1;
            controller.handle(Input::Node(event), now);
        }
    }
    let took = start.elapsed();
    let passes = controller.metrics().passes_total() - passes_before;
    println!(
        "\n[events] {} heartbeat MODIFIED events of {:.1} KiB nodes decoded and filtered in {:.2} s: {:.0} events/s, {:.0} MiB/s; {} forwarded, {} passes triggered",
        lines.len(),
        bytes as f64 / lines.len() as f64 / 1024.0,
        took.as_secs_f64(),
        lines.len() as f64 / took.as_secs_f64(),
        bytes as f64 / took.as_secs_f64() / (1 << 20) as f64,
        forwarded,
        passes
    );
}

// --- 2. planner --------------------------------------------------------------------------

fn planner() {
    println!(
        "\n[planner] plan() with every route in place (the common pass), and with 10 % of routes missing:"
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
            let mut times = Vec::new();
            let mut creates = 0;
            for _ in 0..7 {
                let start = Instant::now();
                let p = plan::plan(&nodes, routes, &cidrs);
                times.push(start.elapsed());
                creates = p.creates.len();
            }
            times.sort();
            println!(
                "  {n:>6} nodes, {label:<20}: median {:>7.2} ms, min {:>7.2} ms ({creates} creates)",
                times[3].as_secs_f64() * 1e3,
                times[0].as_secs_f64() * 1e3
            );
        }
    }
}

// --- 3. peak RSS ---------------------------------------------------------------------

fn rss() {
    let binary = env!("CARGO_BIN_EXE_route-controller");
    println!(
        "\n[rss] peak RSS (VmHWM) of `route-controller run --cloud-provider fake` in watch mode, synced with N nodes"
    );
    println!(
        "      served by a minimal API server ({:.1} KiB of JSON per node):",
        node_json(0, 1).len() as f64 / 1024.0
    );
    // RC_BENCH_NODES=5000 measures one size; RC_BENCH_WRAPPER="valgrind --tool=massif"
    // runs the binary under a profiler.
    let sizes: Vec<usize> = match std::env::var("RC_BENCH_NODES") {
        Ok(v) => v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![0, 5_000, 50_000],
    };
    for n in sizes {
        match measure_rss(binary, n) {
            Ok((hwm, rss, took)) => println!(
                "  {n:>6} nodes: peak {:>6.1} MiB, after sync {:>6.1} MiB, synced in {:.1} s",
                hwm as f64 / 1024.0,
                rss as f64 / 1024.0,
                took.as_secs_f64()
            ),
            Err(e) => println!("  {n:>6} nodes: FAILED: {e}"),
        }
    }
}

fn measure_rss(binary: &str, nodes: usize) -> Result<(u64, u64, Duration), String> {
    let server = NodeServer::start(nodes).map_err(|e| format!("node server: {e}"))?;
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
            "--cloud-provider=fake",
            "--cluster-cidr=10.0.0.0/8",
            "--leader-elect=false",
            "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true",
            &format!("--master=http://127.0.0.1:{}", server.port),
            &format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
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
        .envs(
            std::env::var("MALLOC_ARENA_MAX")
                .ok()
                .map(|v| ("MALLOC_ARENA_MAX", v)),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let result = (|| {
        loop {
            if start.elapsed() > Duration::from_secs(300) {
                return Err("not synced within 300 s".to_string());
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited early: {status}"));
            }
            if http_get(metrics_port, "/readyz").is_some_and(|(code, _)| code == 200) {
                // Let the first pass (50 000 in-memory routes) finish.
                let (_, metrics) = http_get(metrics_port, "/metrics").unwrap_or_default();
                if metrics.lines().any(|l| {
                    l.starts_with("route_controller_route_sync_total ") && !l.ends_with(" 0")
                }) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let took = start.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .map_err(|e| e.to_string())?;
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok((field("VmHWM:"), field("VmRSS:"), took))
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
    let _ = std::fs::remove_dir_all(&home);
    result
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
/// bookmark every few seconds and otherwise stay quiet. Any other request gets 200 {}.
struct NodeServer {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl NodeServer {
    fn start(nodes: usize) -> std::io::Result<NodeServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let flag = flag.clone();
                std::thread::spawn(move || serve(stream, nodes, &flag));
            }
        });
        Ok(NodeServer { port, stop })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(stream: TcpStream, nodes: usize, stop: &AtomicBool) {
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
            while !stop.load(Ordering::Relaxed) {
                let line = "{\"type\":\"BOOKMARK\",\"object\":{\"kind\":\"Node\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"1000\"}}}\n";
                if write!(out, "{:x}\r\n{line}\r\n", line.len()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_secs(5));
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
            let items: Vec<String> = (start..end).map(|i| node_json(i, 1000)).collect();
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
    println!(
        "\n[calls] cloud calls per route mutation (the physical minimum is 1.00), simulate --seed 1:"
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
        let report = sim::run(&options, &mut |_| {});
        let ratio = |mode: &str| {
            let m = report.modes.iter().find(|m| m.mode == mode).expect("mode");
            m.cloud_calls.total() as f64 / m.route_mutations.max(1) as f64
        };
        println!(
            "  {:<16} {:>10.2} {:>16.2} {:>10.2}",
            scenario.name(),
            ratio("poll"),
            ratio("upstream-watch"),
            ratio(Mode::Watch.as_str())
        );
    }
}
