//! A large cluster in the real kube-apiserver, as a kubelet fleet would leave it, for
//! `cargo bench -- scale` and its smoke test (`tests/e2e_scale_harness.rs`).
//!
//! [`load_nodes`] creates realistic nodes (addresses, the kubelet's five conditions,
//! 40 images, managed fields, pod CIDRs, provider ID: about 10 KiB of JSON each) over
//! several connections at once; [`play_heartbeats`] replays the kubelet's status
//! reports (a PATCH of `/status` with new heartbeat times, every
//! `nodeStatusReportFrequency` = 5 min of the kubelet's clock) at a compressed pace.
//! Each node's JSON is generated when it is sent and dropped after: the loader never
//! holds the cluster in memory.
//!
//! Include it after `kube_apiserver` (it uses it through `crate::`):
//! `#[path = "support/scale_cluster.rs"] mod scale_cluster;`.

// Every binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use ureq::Agent;
use ureq::tls::{PemItem, RootCerts, TlsConfig};

use crate::kube_apiserver::KubeApiserver;

/// The cluster CIDR that holds every node's pod CIDR ([`pod_cidr`]), for 65 000
/// nodes at most.
pub const CLUSTER_CIDR: &str = "10.0.0.0/8";
/// The kubelet's `nodeStatusReportFrequency` (its default): how far the heartbeat
/// times of one node's consecutive reports are apart.
pub const STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);
/// Status reports per node in an hour of an idle cluster.
pub const REPORTS_PER_NODE_HOUR: usize = 12;

/// The kubelet's clock at the first report: the nodes were created then.
const EPOCH_SECONDS: u64 = 1_795_000_000;

pub fn node_name(i: usize) -> String {
    format!("node-{i:05}")
}

/// Node `i`'s pod CIDR: `10.(1 + i/256).(i%256).0/24`, clear of the servers' subnet
/// `10.0.0.0/16` of the Hetzner double (`tests/support/e2e_hcloud.rs`).
pub fn pod_cidr(i: usize) -> String {
    format!("10.{}.{}.0/24", 1 + (i >> 8), i & 255)
}

/// Node `i`'s server ID at Hetzner (`hcloud://ID`), so that the same nodes serve
/// the fake cloud and the Hetzner double.
pub fn server_id(i: usize) -> u64 {
    i as u64 + 1
}

/// The node's InternalIP: its server's private IP in the Hetzner double's subnet
/// (`e2e_hcloud::server_ip`, repeated here so this module stands alone).
pub fn internal_ip(i: usize) -> String {
    let n = server_id(i);
    format!("10.0.{}.{}", n / 250, n % 250 + 2)
}

/// A node as a kubelet registers it and reports its status, with managed fields as
/// the kubelet, the node IPAM controller and a route controller leave them, and
/// `NetworkUnavailable=False` already set (routes were in place before the
/// controller under test started, as after a controller restart).
pub fn node(i: usize) -> Value {
    let name = node_name(i);
    let images: Vec<Value> = (0..40)
        .map(|k| {
            json!({
                "names": [
                    format!("registry.example.com/team-{k}/service-{k}@sha256:{:064x}", i * 1000 + k),
                    format!("registry.example.com/team-{k}/service-{k}:v1.{k}.{}", i % 10),
                ],
                "sizeBytes": 10_000_000 + k * 12345,
            })
        })
        .collect();
    let at = rfc3339(EPOCH_SECONDS);
    let condition = |t: &str, s: &str, r: &str| {
        json!({"type": t, "status": s, "reason": r, "message": format!("{r} on {name}"),
            "lastHeartbeatTime": at, "lastTransitionTime": at})
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "node.kubernetes.io/instance-type": "cx32", "topology.kubernetes.io/region": "fsn1",
                       "topology.kubernetes.io/zone": "fsn1-dc14"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": at, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}}},
                              "f:spec": {"f:providerID": {}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": at, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, (format!("v:\"{}\"", pod_cidr(i))): {}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": at, "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastHeartbeatTime": {}, "f:status": {}}},
                                           "f:images": {}, "f:nodeInfo": {"f:bootID": {}}}}}
            ]
        },
        "spec": {"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)], "providerID": format!("hcloud://{}", server_id(i))},
        "status": {
            "addresses": [{"type": "InternalIP", "address": internal_ip(i)}, {"type": "Hostname", "address": name}],
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
                         "kubeProxyVersion": "", "machineID": format!("{i:032x}"), "systemUUID": format!("{i:032x}"),
                         "bootID": format!("{i:032x}")},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
        }
    })
}

/// The kubelet's status report number `round` of a node: the four kubelet conditions
/// with their heartbeat `round` × 5 min after registration (a strategic-merge patch,
/// merged on `type`; NetworkUnavailable is not the kubelet's).
pub fn heartbeat_patch(round: usize) -> Value {
    let at = rfc3339(EPOCH_SECONDS + round as u64 * STATUS_REPORT_FREQUENCY.as_secs());
    let condition = |t: &str, s: &str, r: &str| json!({"type": t, "status": s, "reason": r, "lastHeartbeatTime": at});
    json!({"status": {"conditions": [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        condition("Ready", "True", "KubeletReady"),
    ]}})
}

/// Creates nodes `0..count` (each with its status, in one POST, as the kubelet
/// registers) over `connections` connections at once. Returns how long it took.
/// Panics, naming the node and the server's answer, on the first refusal.
pub fn load_nodes(api: &KubeApiserver, count: usize, connections: usize) -> Duration {
    let started = Instant::now();
    on_connections(api, count, connections, |agent, i| {
        let body = node(i).to_string();
        let (status, text) = send(
            api,
            agent,
            "POST",
            "/api/v1/nodes",
            "application/json",
            body,
        );
        assert!(
            status == 201,
            "creating {} answered {status}: {}",
            node_name(i),
            text.chars().take(400).collect::<String>()
        );
    });
    started.elapsed()
}

/// Sends `reports` kubelet status reports, round-robin over nodes `0..nodes` (report
/// `j` is round `first_round + j / nodes` of node `j % nodes`), spread evenly over `window` on
/// `connections` connections, or as fast as the server takes them if that is
/// slower. Returns how long it took.
pub fn play_heartbeats(
    api: &KubeApiserver,
    nodes: usize,
    reports: usize,
    window: Duration,
    connections: usize,
    first_round: usize,
) -> Duration {
    let started = Instant::now();
    let spacing = window.as_secs_f64() / reports.max(1) as f64;
    on_connections(api, reports, connections, |agent, j| {
        let due = started + Duration::from_secs_f64(spacing * j as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let (i, round) = (j % nodes, first_round + j / nodes);
        let path = format!("/api/v1/nodes/{}/status", node_name(i));
        let body = heartbeat_patch(round).to_string();
        let (status, text) = send(
            api,
            agent,
            "PATCH",
            &path,
            "application/strategic-merge-patch+json",
            body,
        );
        assert!(
            status == 200,
            "heartbeat of {} answered {status}: {}",
            node_name(i),
            text.chars().take(400).collect::<String>()
        );
    });
    started.elapsed()
}

/// Runs `job(agent, k)` for every `k` in `0..count`, on `connections` threads, each
/// with its own agent (one kept-alive TLS connection each) taking every
/// `connections`-th `k`.
fn on_connections(
    api: &KubeApiserver,
    count: usize,
    connections: usize,
    job: impl Fn(&Agent, usize) + Sync,
) {
    let connections = connections.max(1);
    std::thread::scope(|scope| {
        for worker in 0..connections {
            let job = &job;
            let agent = agent(api.ca_pem());
            scope.spawn(move || {
                for k in (worker..count).step_by(connections) {
                    job(&agent, k);
                }
            });
        }
    });
}

/// One request with the admin token; the status and the body (read and dropped by
/// the caller, never kept).
fn send(
    api: &KubeApiserver,
    agent: &Agent,
    method: &str,
    path: &str,
    content_type: &str,
    body: String,
) -> (u16, String) {
    let url = format!("{}{path}", api.server());
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(&url)
        .header("Authorization", format!("Bearer {}", api.admin_token()))
        .header("Accept", "application/json")
        .header("Content-Type", content_type)
        .body(body)
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let mut response = agent
        .run(request)
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let text = response
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_string()
        .unwrap_or_else(|e| panic!("{method} {url}: reading the answer: {e}"));
    (status, text)
}

/// An agent that trusts the harness's CA and keeps one connection alive.
fn agent(ca_pem: &str) -> Agent {
    let certs: Vec<_> = ureq::tls::parse_pem(ca_pem.as_bytes())
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(cert)) => Some(cert),
            _ => None,
        })
        .collect();
    let tls = TlsConfig::builder()
        .root_certs(RootCerts::new_with_certs(&certs))
        .build();
    Agent::new_with_config(
        Agent::config_builder()
            .tls_config(tls)
            .http_status_as_error(false)
            .proxy(None)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(60)))
            .build(),
    )
}

/// Compacts etcd's history up to its current revision (through etcd's JSON gateway),
/// as the API server does every 5 minutes: a watch from an older resource version is
/// then refused with 410 Gone. Returns the revision.
pub fn compact_etcd(api: &KubeApiserver) -> u64 {
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let post = |path: &str, body: Value| -> Value {
        let url = format!("{}{path}", api.etcd_url());
        let mut response = agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|e| panic!("POST {url}: reading the answer: {e}"));
        assert_eq!(status, 200, "POST {url}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("POST {url}: {e}: {text}"))
    };
    // Any range answers with the current revision in its header ("AA==" is the key "\0").
    let header = post("/v3/kv/range", json!({"key": "AA=="}));
    let revision: u64 = header["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("etcd's range answer has no revision: {header}"));
    post(
        "/v3/kv/compaction",
        json!({"revision": revision.to_string(), "physical": true}),
    );
    revision
}

/// `seconds` since the Unix epoch as RFC 3339 UTC (`2026-11-18T11:06:40Z`).
pub fn rfc3339(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// A process's memory and CPU from `/proc`: peak RSS (`VmHWM`) and RSS (`VmRSS`) in
/// KiB, and CPU seconds (user + system).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcStats {
    pub peak_kib: u64,
    pub rss_kib: u64,
    pub cpu_seconds: f64,
}

impl ProcStats {
    /// Reads `/proc/PID/status` and `/proc/PID/stat`; `None` once the process is gone.
    pub fn of(pid: u32) -> Option<ProcStats> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces, inside parentheses):
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after ')'.
        let after = stat.rsplit_once(')')?.1;
        let ticks: Vec<u64> = after
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|v| v.parse().ok())
            .collect();
        let ticks = ticks.iter().sum::<u64>();
        Some(ProcStats {
            peak_kib: field("VmHWM:")?,
            rss_kib: field("VmRSS:")?,
            cpu_seconds: ticks as f64 / clock_ticks_per_second() as f64,
        })
    }
}

/// `getconf CLK_TCK` (100 on Linux unless the kernel was built otherwise).
fn clock_ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}
