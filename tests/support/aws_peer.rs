//! Ours beside upstream's route controller with its real AWS provider, both against
//! the same moto, counted in EC2 requests.
//!
//! - [`Ec2Proxy`]: a loopback HTTP/1.1 proxy in front of moto that records every EC2
//!   request by its `Action` (and, for `CreateRoute`, the destination and when moto
//!   answered), so that both controllers are counted the same way, in the unit an
//!   operator pays in.
//! - [`AwsPeer`]: `tests/kube-apiserver/aws-route-controller` (upstream's
//!   `k8s.io/cloud-provider/controllers/route` with `k8s.io/cloud-provider-aws`'s
//!   `Routes`) as a child process; [`OursAws`]: our binary with
//!   `--cloud-provider=aws`, its EC2 endpoint pointed at the proxy.
//! - [`Cluster`]: a VPC, a tagged route table and a pool of instances in moto, and the
//!   node script against the real kube-apiserver: nodes named after their instances'
//!   private DNS names (what cloud-provider-aws expects), with their providerIDs.
//! - [`run_peer`]: one measured run, start-up and a rolling replacement, or an idle
//!   period with the poll period shortened.
//!
//! Include with `kube_apiserver.rs` and `moto.rs`:
//!
//! ```ignore
//! #[path = "support/kube_apiserver.rs"] mod kube_apiserver;
//! #[path = "support/moto.rs"] mod moto;
//! #[path = "support/aws_peer.rs"] mod aws_peer;
//! ```

// Every user of this module uses only part of it.
#![allow(dead_code)]

#[path = "http_wire.rs"]
mod http_wire;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use crate::kube_apiserver::{KubeApiserver, aws_route_controller_binary};
use crate::moto::{self, Ec2, Moto};
use route_controller::cloud::aws::query::Params;

/// How long a controller may take to be ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

// ---- the counting proxy ------------------------------------------------------------

/// One EC2 request as the proxy forwarded it.
#[derive(Clone, Debug)]
pub struct Ec2Call {
    pub action: String,
    /// When moto's answer had been read.
    pub answered: SystemTime,
    pub status: u16,
    /// `DestinationCidrBlock` of `CreateRoute` and `DeleteRoute`.
    pub destination: Option<String>,
}

/// A proxy in front of moto that counts EC2 requests by `Action`. Dropping it stops
/// accepting; open connections end with their clients.
///
/// It also makes up for one thing moto does not model: EC2 marks a route to a
/// terminated instance `blackhole`, moto keeps it `active`. The proxy rewrites the
/// state in `DescribeRouteTables` replies for instances the script terminated
/// ([`Ec2Proxy::terminated`]), for both controllers alike. Without it
/// cloud-provider-aws's ListRoutes fails for as long as such a route exists (it maps
/// every active route's instance to a node and errors on one without a node), so a
/// rolling replacement would stall after its first step.
pub struct Ec2Proxy {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<Ec2Call>>>,
    terminated: Arc<Mutex<Vec<String>>>,
    shutdown: Arc<AtomicBool>,
}

impl Ec2Proxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream`
    /// (`http://127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> Ec2Proxy {
        let target = upstream
            .strip_prefix("http://")
            .unwrap_or(upstream)
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the EC2 proxy");
        let addr = listener.local_addr().expect("the EC2 proxy's address");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let terminated = Arc::new(Mutex::new(Vec::new()));
        let shutdown = Arc::new(AtomicBool::new(false));
        {
            let calls = calls.clone();
            let terminated = terminated.clone();
            let shutdown = shutdown.clone();
            thread::Builder::new()
                .name("ec2-proxy".into())
                .spawn(move || {
                    for stream in listener.incoming() {
                        if shutdown.load(Ordering::SeqCst) {
                            return;
                        }
                        let Ok(stream) = stream else { continue };
                        let calls = calls.clone();
                        let terminated = terminated.clone();
                        let target = target.clone();
                        let _ = thread::Builder::new()
                            .name("ec2-proxy-conn".into())
                            .spawn(move || proxy_connection(stream, &target, &calls, &terminated));
                    }
                })
                .expect("spawn the EC2 proxy");
        }
        Ec2Proxy {
            addr,
            calls,
            terminated,
            shutdown,
        }
    }

    /// From now on, routes to this instance are `blackhole`, as EC2 shows them once the
    /// instance is terminated.
    pub fn terminated(&self, instance: &str) {
        self.terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(instance.to_string());
    }

    pub fn forget_terminated(&self) {
        self.terminated
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<Ec2Call> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn clear(&self) {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

impl Drop for Ec2Proxy {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Requests by action, answered in `[from, to)`.
pub fn count_by_action(
    calls: &[Ec2Call],
    from: SystemTime,
    to: SystemTime,
) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for c in calls
        .iter()
        .filter(|c| c.answered >= from && c.answered < to)
    {
        *counts.entry(c.action.clone()).or_insert(0) += 1;
    }
    counts
}

fn proxy_connection(
    client: TcpStream,
    target: &str,
    calls: &Mutex<Vec<Ec2Call>>,
    terminated: &Mutex<Vec<String>>,
) {
    let _ = client.set_nodelay(true);
    let Ok(read_half) = client.try_clone() else {
        return;
    };
    let mut requests = BufReader::new(read_half);
    let mut client = client;
    let mut upstream: Option<(TcpStream, BufReader<TcpStream>)> = None;
    while let Some(request) = http_wire::read_request(&mut requests) {
        if upstream.is_none() {
            let Ok(s) = TcpStream::connect(target) else {
                return;
            };
            let _ = s.set_nodelay(true);
            let Ok(r) = s.try_clone() else { return };
            upstream = Some((s, BufReader::new(r)));
        }
        let Some((to_moto, from_moto)) = upstream.as_mut() else {
            return;
        };
        let mut head = format!("{} {} HTTP/1.1\r\n", request.method, request.target);
        for (k, v) in &request.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut message = head.into_bytes();
        message.extend_from_slice(&request.body);
        if to_moto.write_all(&message).is_err() {
            return;
        }
        let Some((status, mut response, close)) = read_response(from_moto) else {
            return;
        };
        let form = String::from_utf8_lossy(&request.body).into_owned();
        let (_, query) = request.path_and_query();
        let field = |name: &str| {
            form.split('&')
                .chain(query.split('&'))
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| http_wire::percent_decode(v, true))
        };
        let action = field("Action").unwrap_or_else(|| "(none)".to_string());
        if action == "DescribeRouteTables" {
            let gone = terminated.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if !gone.is_empty() {
                response = blackhole_routes(response, &gone);
            }
        }
        calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Ec2Call {
                action,
                answered: SystemTime::now(),
                status,
                destination: field("DestinationCidrBlock"),
            });
        if client.write_all(&response).is_err() {
            return;
        }
        let client_close = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if close || client_close {
            return;
        }
    }
}

/// A `DescribeRouteTables` reply with the routes to `gone` instances marked
/// `blackhole`. Only a `Content-Length` reply is rewritten (moto sends no other).
fn blackhole_routes(response: Vec<u8>, gone: &[String]) -> Vec<u8> {
    let text = String::from_utf8_lossy(&response).into_owned();
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return response;
    };
    if !head.to_ascii_lowercase().contains("content-length:") {
        return response;
    }
    let mut body = body.to_string();
    for instance in gone {
        let needle = format!("<instanceId>{instance}</instanceId>");
        let mut from = 0;
        while let Some(at) = body[from..].find(&needle).map(|i| i + from) {
            let start = body[..at].rfind("<item>").unwrap_or(0);
            let end = body[at..].find("</item>").map_or(body.len(), |i| i + at);
            let item =
                body[start..end].replace("<state>active</state>", "<state>blackhole</state>");
            body.replace_range(start..end, &item);
            from = start + item.len();
        }
    }
    let head: Vec<String> = head
        .split("\r\n")
        .map(|line| match line.split_once(':') {
            Some((k, _)) if k.trim().eq_ignore_ascii_case("content-length") => {
                format!("{k}: {}", body.len())
            }
            _ => line.to_string(),
        })
        .collect();
    format!("{}\r\n\r\n{body}", head.join("\r\n")).into_bytes()
}

/// Reads one HTTP/1.1 response whole (Content-Length or chunked body), returning its
/// status, its bytes as received, and whether the connection closes after it.
fn read_response(reader: &mut BufReader<TcpStream>) -> Option<(u16, Vec<u8>, bool)> {
    let mut raw = Vec::new();
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
    raw.extend_from_slice(line.as_bytes());
    let (mut length, mut chunked, mut close) = (None, false, false);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        raw.extend_from_slice(h.as_bytes());
        let t = h.trim_end();
        if t.is_empty() {
            break;
        }
        if let Some((k, v)) = t.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("content-length") {
                length = v.parse::<usize>().ok();
            } else if k.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.eq_ignore_ascii_case("chunked");
            } else if k.eq_ignore_ascii_case("connection") {
                close = v.eq_ignore_ascii_case("close");
            }
        }
    }
    if chunked {
        loop {
            let mut size_line = String::new();
            if reader.read_line(&mut size_line).ok()? == 0 {
                return None;
            }
            raw.extend_from_slice(size_line.as_bytes());
            let size = usize::from_str_radix(size_line.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).ok()?;
            raw.extend_from_slice(&chunk);
            if size == 0 {
                break;
            }
        }
    } else if let Some(n) = length {
        let mut body = vec![0; n];
        reader.read_exact(&mut body).ok()?;
        raw.extend_from_slice(&body);
    } else {
        // No length: the body runs to the end of the connection.
        reader.read_to_end(&mut raw).ok()?;
        close = true;
    }
    Some((status, raw, close))
}

// ---- process figures ---------------------------------------------------------------

/// User plus system CPU seconds of a live process, from `/proc/PID/stat`.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/stat (is the process alive?): {e}"));
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Peak resident set size of a live process in MiB (`VmHWM`).
pub fn peak_rss_mib(pid: u32) -> f64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status (is the process alive?): {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
        .unwrap_or(0.0)
}

// ---- the cluster: moto resources and the node script -------------------------------

/// The cluster name, the route table's tag and the AWS peer's `KubernetesClusterID`.
pub const CLUSTER: &str = "peers";
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// An instance a node runs on.
#[derive(Clone, Debug)]
pub struct Instance {
    pub id: String,
    pub private_dns_name: String,
    pub private_ip: String,
    pub zone: String,
}

/// A VPC with one subnet, the cluster's tagged route table and a pool of instances.
pub struct Cluster {
    pub ec2: Ec2,
    pub vpc: String,
    pub subnet: String,
    pub ami: String,
    pub table: String,
    pub instances: Vec<Instance>,
    /// Instances the script terminated, by index: the next run gets new ones there.
    terminated: Vec<bool>,
}

impl Cluster {
    /// Creates the VPC, the tagged table and `instances` instances in moto.
    pub fn create(moto: &Moto, instances: usize) -> Cluster {
        let ec2 = moto.ec2();
        let network = moto::network(&ec2);
        let tag = format!("kubernetes.io/cluster/{CLUSTER}");
        let table = ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]);
        let mut cluster = Cluster {
            ec2,
            vpc: network.vpc,
            subnet: network.subnet,
            ami: network.ami,
            table,
            instances: Vec::new(),
            terminated: vec![false; instances],
        };
        cluster.instances = cluster.launch(instances);
        cluster
    }

    /// Launches `n` instances in the subnet (directly in moto, not counted).
    fn launch(&self, n: usize) -> Vec<Instance> {
        let root = self.ec2.call(
            "RunInstances",
            Params::new()
                .add("ImageId", self.ami.as_str())
                .add("MinCount", n.to_string())
                .add("MaxCount", n.to_string())
                .add("InstanceType", "t3.micro")
                .add("SubnetId", self.subnet.as_str()),
        );
        root.items("instancesSet")
            .map(|item| Instance {
                id: item.text_of("instanceId").expect("instanceId").to_string(),
                private_dns_name: item
                    .text_of("privateDnsName")
                    .expect("privateDnsName")
                    .to_string(),
                private_ip: item
                    .text_of("privateIpAddress")
                    .expect("privateIpAddress")
                    .to_string(),
                zone: item
                    .child("placement")
                    .and_then(|p| p.text_of("availabilityZone"))
                    .expect("placement")
                    .to_string(),
            })
            .collect()
    }

    /// Terminates node `k`'s instance (directly in moto, not counted).
    pub fn terminate(&mut self, k: usize) {
        self.ec2.terminate(&self.instances[k].id);
        self.terminated[k] = true;
    }

    /// Replaces every terminated instance with a new one.
    pub fn renew(&mut self) {
        for k in 0..self.instances.len() {
            if self.terminated[k] {
                self.instances[k] = self.launch(1).remove(0);
                self.terminated[k] = false;
            }
        }
    }

    /// cloud-provider-aws's INI, with EC2 at `endpoint` (`Service` is the SDK's service
    /// ID, `EC2`; any other spelling is silently ignored and the real endpoint used).
    /// VPC, subnet and cluster ID make it skip the instance metadata service.
    pub fn cloud_config(&self, endpoint: &str) -> String {
        format!(
            "[Global]\nRegion = {region}\nVPC = {vpc}\nSubnetID = {subnet}\nKubernetesClusterID = {CLUSTER}\n\
             [ServiceOverride \"ec2\"]\nService = EC2\nRegion = {region}\nURL = {endpoint}\nSigningRegion = {region}\nSigningName = ec2\n",
            region = moto::REGION,
            vpc = self.vpc,
            subnet = self.subnet,
        )
    }

    /// Routes in the cluster's table besides the VPC's local one: (destination, instance).
    pub fn routes(&self) -> Vec<(String, Option<String>)> {
        self.ec2
            .routes(&self.table)
            .into_iter()
            .filter(|(_, target, _)| target.is_some())
            .map(|(d, t, _)| (d, t))
            .collect()
    }

    /// Deletes every route but the local one, directly in moto (not counted).
    pub fn clear_routes(&self) {
        for (destination, _) in self.routes() {
            self.ec2.call(
                "DeleteRoute",
                Params::new()
                    .add("RouteTableId", self.table.as_str())
                    .add("DestinationCidrBlock", destination),
            );
        }
    }

    /// Node `k` of the script runs on instance `k` with pod CIDR `10.244.k.0/24`.
    pub fn node_name(&self, k: usize) -> &str {
        &self.instances[k].private_dns_name
    }

    pub fn create_node(&self, api: &KubeApiserver, k: usize) {
        let i = &self.instances[k];
        let node = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": i.private_dns_name},
            "spec": {"podCIDR": pod_cidr(k), "podCIDRs": [pod_cidr(k)],
                     "providerID": format!("aws:///{}/{}", i.zone, i.id)},
            "status": {"addresses": [{"type": "InternalIP", "address": i.private_ip},
                                      {"type": "Hostname", "address": i.private_dns_name}]},
        });
        api.post_json("/api/v1/nodes", &node);
    }

    pub fn delete_node(&self, api: &KubeApiserver, k: usize) {
        api.delete(&format!("/api/v1/nodes/{}", self.node_name(k)));
    }
}

pub fn pod_cidr(k: usize) -> String {
    format!("10.244.{k}.0/24")
}

/// Deletes every node and waits until none is listed.
pub fn delete_all_nodes(api: &KubeApiserver) {
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
        thread::sleep(Duration::from_millis(50));
    }
}

// ---- the controllers ---------------------------------------------------------------

/// Which controller, and in which mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Upstream's route controller with cloud-provider-aws.
    Upstream { watch: bool },
    /// route-controller with its AWS provider.
    Ours { watch: bool },
}

impl Peer {
    pub fn label(&self) -> String {
        match self {
            Peer::Upstream { watch } => format!("upstream+aws, {}", mode(*watch)),
            Peer::Ours { watch } => format!("ours, {}", mode(*watch)),
        }
    }
}

fn mode(watch: bool) -> &'static str {
    if watch { "watch" } else { "poll" }
}

/// Timings a run gives both controllers alike.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// `--route-reconciliation-period`.
    pub poll_period: Duration,
    /// Our `--route-list-max-age` (watch mode): scaled with the poll period when the
    /// run compresses time.
    pub route_list_max_age: Duration,
}

impl Timing {
    pub fn defaults() -> Timing {
        Timing {
            poll_period: Duration::from_secs(10),
            route_list_max_age: Duration::from_secs(300),
        }
    }

    /// Time compressed `factor` times.
    pub fn compressed(factor: u32) -> Timing {
        let d = Timing::defaults();
        Timing {
            poll_period: d.poll_period / factor,
            route_list_max_age: d.route_list_max_age / factor,
        }
    }
}

/// A running controller of either kind.
pub struct Controller {
    child: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
    /// When it said it was ready (upstream: node informer synced; ours: /readyz 200).
    pub ready_at: SystemTime,
}

impl Controller {
    pub fn start(
        peer: Peer,
        api: &KubeApiserver,
        cluster: &Cluster,
        proxy: &Ec2Proxy,
        timing: Timing,
        dir: &Path,
    ) -> Controller {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        match peer {
            Peer::Upstream { watch } => start_upstream(watch, api, cluster, proxy, timing, dir),
            Peer::Ours { watch } => start_ours(watch, api, proxy, timing, dir),
        }
    }

    /// A peer process started elsewhere (`gce_peer.rs`), ready at `ready_at`, its
    /// stderr in `log`.
    pub fn spawned(
        child: Child,
        stdin: Option<ChildStdin>,
        log: PathBuf,
        ready_at: SystemTime,
    ) -> Controller {
        Controller {
            child,
            stdin,
            log,
            ready_at,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU seconds and peak RSS (MiB) so far.
    pub fn figures(&self) -> (f64, f64) {
        (cpu_seconds(self.pid()), peak_rss_mib(self.pid()))
    }

    /// Stops it (stdin closed and SIGTERM) and waits; panics if it does not exit 0
    /// within 30 s.
    pub fn stop(mut self) {
        drop(self.stdin.take());
        let _ = Command::new("kill").arg(self.pid().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(
                        status.success(),
                        "{} exited with {status}{}",
                        self.log.display(),
                        self.log_tail()
                    );
                    return;
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                _ => panic!(
                    "{} did not exit within 30 s{}",
                    self.log.display(),
                    self.log_tail()
                ),
            }
        }
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "\n---- {} (last lines):\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn start_upstream(
    watch: bool,
    api: &KubeApiserver,
    cluster: &Cluster,
    proxy: &Ec2Proxy,
    timing: Timing,
    dir: &Path,
) -> Controller {
    let config = dir.join("cloud-config.ini");
    fs::write(&config, cluster.cloud_config(&proxy.url()))
        .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
    let log = dir.join("aws-route-controller.log");
    let log_file = File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let binary = aws_route_controller_binary();
    let mut child = Command::new(binary)
        .arg(format!("--kubeconfig={}", api.admin_kubeconfig().display()))
        .arg(format!("--cloud-config={}", config.display()))
        .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
        .arg(format!("--cluster-name={CLUSTER}"))
        .arg(format!("--watch={watch}"))
        .arg(format!(
            "--route-reconciliation-period={}ms",
            timing.poll_period.as_millis()
        ))
        .env("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
        .env("AWS_REGION", moto::REGION)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", binary.display()));
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("READY ") {
                let _ = tx.send(SystemTime::now());
            }
        }
    });
    let mut controller = Controller {
        child,
        stdin,
        log,
        ready_at: SystemTime::UNIX_EPOCH,
    };
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(at) => controller.ready_at = at,
        Err(_) => panic!(
            "aws-route-controller was not ready within {READY_TIMEOUT:?}{}",
            controller.log_tail()
        ),
    }
    controller
}

fn start_ours(
    watch: bool,
    api: &KubeApiserver,
    proxy: &Ec2Proxy,
    timing: Timing,
    dir: &Path,
) -> Controller {
    // Kept although AWS's default is now 500 routes a table: without it ours reads the
    // quota from Service Quotas, which moto reports at 50 (the default before June
    // 2025; the script's 50 nodes and the VPC's local route do not fit) and which
    // outside moto would be a call to the public endpoint. The limit, set as an
    // operator would, makes no call and keeps the runs comparable; upstream does not
    // know of the limit (moto's EC2 has none).
    let config = dir.join("cloud-config.ini");
    fs::write(&config, "[Global]\nRouteTableRouteLimit = 100\n")
        .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
    let mut command = ours_command("aws", &config, watch, api, timing);
    command
        .env("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
        .env("AWS_REGION", moto::REGION)
        .env("AWS_ENDPOINT_URL_EC2", proxy.url())
        .env("AWS_EC2_METADATA_DISABLED", "true");
    spawn_ours(command, dir.join("route-controller.log"))
}

/// Our binary's `run` with `--cloud-provider=<provider>` and its `--cloud-config`
/// against `api`, without leader election, timed as `timing`, in watch mode or poll
/// mode; the caller adds the cloud's environment.
pub fn ours_command(
    provider: &str,
    config: &Path,
    watch: bool,
    api: &KubeApiserver,
    timing: Timing,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_route-controller"));
    command.args([
        "run".to_string(),
        format!("--cloud-provider={provider}"),
        format!("--cloud-config={}", config.display()),
        format!("--cluster-name={CLUSTER}"),
        format!("--cluster-cidr={CLUSTER_CIDR}"),
        "--leader-elect=false".to_string(),
        "--metrics-bind-address=127.0.0.1:0".to_string(),
        format!("--kubeconfig={}", api.admin_kubeconfig().display()),
        format!(
            "--route-reconciliation-period={}ms",
            timing.poll_period.as_millis()
        ),
        format!(
            "--route-list-max-age={}ms",
            timing.route_list_max_age.as_millis()
        ),
    ]);
    if watch {
        command.arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true");
    }
    command.env("RUST_LOG", "info");
    command
}

/// Starts ours from [`ours_command`], its log in `log`, and waits until its `/readyz`
/// answers 200: that instant is its `ready_at`.
pub fn spawn_ours(mut command: Command, log: PathBuf) -> Controller {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start route-controller: {e}"));
    let stdin = child.stdin.take();
    let stderr = child.stderr.take().expect("piped stderr");
    let mut log_file =
        File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
    let (port_tx, port_rx) = mpsc::channel();
    thread::spawn(move || {
        let marker = "serving /metrics, /healthz and /readyz on http://";
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log_file, "{line}");
            if let Some((_, address)) = line.split_once(marker)
                && let Ok(address) = address.trim().parse::<SocketAddr>()
            {
                let _ = port_tx.send(address);
            }
        }
    });
    let mut controller = Controller {
        child,
        stdin,
        log,
        ready_at: SystemTime::UNIX_EPOCH,
    };
    let Ok(address) = port_rx.recv_timeout(READY_TIMEOUT) else {
        panic!(
            "route-controller logged no metrics address{}",
            controller.log_tail()
        );
    };
    let deadline = Instant::now() + READY_TIMEOUT;
    while http_status(address, "/readyz") != Some(200) {
        assert!(
            Instant::now() < deadline,
            "route-controller not ready within {READY_TIMEOUT:?}{}",
            controller.log_tail()
        );
        thread::sleep(Duration::from_millis(10));
    }
    controller.ready_at = SystemTime::now();
    controller
}

/// The status of a plain `GET`, or `None` when the connection fails.
fn http_status(address: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

// ---- one measured run --------------------------------------------------------------

/// The node script of a run.
#[derive(Clone, Copy, Debug)]
pub struct Script {
    /// Nodes (and routes) at start.
    pub nodes: usize,
    /// Nodes replaced one after another after start-up (0: none).
    pub replaced: usize,
    /// Between two replacements.
    pub spacing: Duration,
    /// From deleting a node to creating its replacement.
    pub replace_after: Duration,
    /// Quiet time after the last replacement before the run ends.
    pub settle: Duration,
    /// Idle period measured after start-up (with every route in place at start).
    pub idle: Duration,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct PeerRun {
    pub label: String,
    /// Start-up: from the process start to the last initial route.
    pub startup: Duration,
    pub startup_requests: BTreeMap<String, u64>,
    /// From the first replacement to the end.
    pub rolling_requests: BTreeMap<String, u64>,
    /// Node created to its route created (moto's answer to the CreateRoute), per
    /// replacement.
    pub node_to_route: Vec<Duration>,
    /// Replacement nodes that got no route.
    pub missing: usize,
    /// In the idle window.
    pub idle_requests: BTreeMap<String, u64>,
    /// CPU seconds and peak RSS (MiB) of the controller process at the end.
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
}

pub fn total(requests: &BTreeMap<String, u64>) -> u64 {
    requests.values().sum()
}

/// One run of `peer`: reset nodes and routes, create `script.nodes` nodes, start the
/// controller, wait for every initial route, then either replace nodes one by one or
/// (with `script.idle`) stay idle, and stop.
///
/// With an idle script the initial routes are put in place before the controller
/// starts, so that the idle window measures only what an idle cluster costs.
pub fn run_peer(
    peer: Peer,
    api: &KubeApiserver,
    cluster: &mut Cluster,
    proxy: &Ec2Proxy,
    script: Script,
    timing: Timing,
    dir: &Path,
) -> PeerRun {
    assert!(
        cluster.instances.len() >= script.nodes + script.replaced,
        "the cluster has {} instances, the script needs {}",
        cluster.instances.len(),
        script.nodes + script.replaced
    );
    delete_all_nodes(api);
    cluster.clear_routes();
    cluster.renew();
    proxy.forget_terminated();
    for k in 0..script.nodes {
        cluster.create_node(api, k);
    }
    if script.idle > Duration::ZERO {
        for k in 0..script.nodes {
            cluster
                .ec2
                .create_route(&cluster.table, &pod_cidr(k), &cluster.instances[k].id);
        }
    }
    proxy.clear();
    let started = SystemTime::now();
    let controller = Controller::start(peer, api, cluster, proxy, timing, dir);
    let mut run = PeerRun {
        label: peer.label(),
        ..PeerRun::default()
    };

    // Start-up: every initial route in the table.
    let deadline = Instant::now() + Duration::from_secs(120);
    let initial: Vec<String> = (0..script.nodes).map(pod_cidr).collect();
    loop {
        let routes = cluster.routes();
        if initial.iter().all(|c| routes.iter().any(|(d, _)| d == c)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: not every initial route within 120 s: {routes:?}{}",
            run.label,
            controller.log_tail()
        );
        thread::sleep(Duration::from_millis(50));
    }
    let calls = proxy.calls();
    let last_create = calls
        .iter()
        .filter(|c| c.action == "CreateRoute" && c.status == 200)
        .map(|c| c.answered)
        .max()
        .unwrap_or_else(SystemTime::now);
    run.startup = last_create.duration_since(started).unwrap_or_default();

    if script.idle > Duration::ZERO {
        // Settle one poll period (the first pass), then measure.
        thread::sleep(timing.poll_period.max(Duration::from_secs(1)));
        let from = SystemTime::now();
        run.startup_requests = count_by_action(&proxy.calls(), started, from);
        thread::sleep(script.idle);
        run.idle_requests = count_by_action(&proxy.calls(), from, SystemTime::now());
    } else {
        // The rolling replacement starts after a quiet second.
        thread::sleep(Duration::from_secs(1));
        let from = SystemTime::now();
        run.startup_requests = count_by_action(&proxy.calls(), started, from);
        let mut created = Vec::new();
        for i in 0..script.replaced {
            if i > 0 {
                thread::sleep(script.spacing - script.replace_after);
            }
            // As a node group replaces a node: the instance terminates (EC2 marks its
            // routes blackhole), then the node object goes.
            proxy.terminated(&cluster.instances[i].id);
            cluster.terminate(i);
            cluster.delete_node(api, i);
            thread::sleep(script.replace_after);
            cluster.create_node(api, script.nodes + i);
            created.push((pod_cidr(script.nodes + i), SystemTime::now()));
        }
        thread::sleep(script.settle);
        let calls = proxy.calls();
        run.rolling_requests = count_by_action(&calls, from, SystemTime::now());
        for (cidr, at) in created {
            let routed = calls
                .iter()
                .filter(|c| c.action == "CreateRoute" && c.status == 200)
                .filter(|c| c.destination.as_deref() == Some(cidr.as_str()) && c.answered >= at)
                .map(|c| c.answered)
                .min();
            match routed {
                Some(t) => run
                    .node_to_route
                    .push(t.duration_since(at).unwrap_or_default()),
                None => run.missing += 1,
            }
        }
    }
    (run.cpu_seconds, run.peak_rss_mib) = controller.figures();
    controller.stop();
    run
}

/// Nearest-rank median and maximum, in seconds.
pub fn p50_max(samples: &[Duration]) -> (f64, f64) {
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

/// `DescribeRouteTables 3, CreateRoute 2`: the requests by action, most first.
pub fn by_action(requests: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = requests.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(a, n)| format!("{a} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}
