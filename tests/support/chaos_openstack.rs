//! The chaos run of `tests/support/chaos.rs` against a real Keystone and Neutron
//! (`tests/support/openstack_real.rs`), in either of Neutron's modes (issue 41): two
//! replicas with leader election, the faults of every chaos run, and on top:
//!
//! - Neutron's own failures through an HTTP layer per replica
//!   (`HttpFaultLayer::start_neutron`): 500 and 503 on a write, 429 on any call, and
//!   a write's reply lost after Neutron made the change;
//! - Neutron stopped and started again on its database halfway through;
//! - another writer, for the whole run, of routes on the same router (outside the
//!   cluster CIDR and inside it, to an address that is no node's) and of VIPs on the
//!   nodes' ports, playing by Neutron's rules: `add_extraroutes`/`remove_extraroutes`
//!   with `extraroute-atomic`, else the whole list with `If-Match`; pairs read, then
//!   written with `If-Match`, read again on 412.
//!
//! Each replica's process has a Keystone user of its own and reaches Neutron through
//! a catalog region of its own (the region's endpoint is that replica's fault proxy),
//! so the layer's log tells which process sent each write (its token's user).
//!
//! The routes converge when the router holds exactly the nodes' routes, the foreign
//! route and the routes the other writer left, and every node port holds exactly its
//! node's pod CIDR (if its node exists) and the VIPs the other writer left there.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::chaos::{self, Cloud, CloudWrite, FOREIGN, Figures, MACHINES, Machine};
use crate::controller_process::Spawn;
use crate::e2e_cluster::Identity;
use crate::http_fault::{Answer, HttpFaultLayer};
use crate::kube_apiserver::KubeApiserver;
use crate::openstack_real::{self, MEMBER_PASSWORD, Mode, Options, PROJECT, RealCloud, Reply};

/// The next hop of every route that is not ours: an address of the node subnet that
/// no port holds (a VPN appliance's VIP, say).
const FOREIGN_HOP: &str = "10.0.0.250";
/// Neutron's calls that change something.
const WRITES: [&str; 4] = [
    "routers.update",
    "routers.add_extraroutes",
    "routers.remove_extraroutes",
    "ports.update",
];
/// The other writer's routes: outside the cluster CIDR, and inside it but to
/// [`FOREIGN_HOP`], which is no node's.
const OTHER_ROUTES: [&str; 6] = [
    "192.168.0.0/24",
    "192.168.1.0/24",
    "192.168.2.0/24",
    "192.168.3.0/24",
    "10.244.200.0/24",
    "10.244.201.0/24",
];
/// The other writer's VIPs (at most these per port, under Neutron's default of 10
/// pairs a port with the pod CIDR).
const OTHER_VIPS: [&str; 4] = [
    "10.0.0.200/32",
    "10.0.0.201/32",
    "10.0.0.202/32",
    "10.0.0.203/32",
];

/// How long the other writer keeps trying one change (Neutron's restart takes
/// seconds).
const OTHER_PATIENCE: Duration = Duration::from_secs(120);

/// Machine `id`'s address on the node subnet.
fn machine_ip(id: usize) -> String {
    format!("10.0.0.{}", 10 + id)
}

/// A run against a fresh Keystone and Neutron in `mode`.
pub fn openstack(settings: chaos::Settings, mode: Mode) -> Figures {
    let (cloud, mut api) = std::thread::scope(|s| {
        let cloud = s.spawn(move || RealCloud::start(Options::new(mode)));
        let api = KubeApiserver::start_fresh();
        (cloud.join().expect("Keystone and Neutron start"), api)
    });
    let identity = Identity::provision(&api, "e2e-chaos");
    let member = cloud.member();
    let network = member.create_network("chaos-nodes");
    let subnet = member.create_subnet(&network, "10.0.0.0/24");
    let router = member.create_router("chaos-router");
    member.add_router_interface(&router, &subnet);
    let ports: Vec<String> = (1..=MACHINES)
        .map(|id| member.create_instance_port(&network, &instance(id), &machine_ip(id)))
        .collect();
    member.set_routes(&router, &[(FOREIGN, FOREIGN_HOP)]);
    let neutron: SocketAddr = cloud
        .neutron_url
        .trim_start_matches("http://")
        .parse()
        .expect("Neutron's address");
    let os = OpenStack {
        cloud: &cloud,
        mode,
        router,
        ports,
        layers: [
            HttpFaultLayer::start_neutron(neutron),
            HttpFaultLayer::start_neutron(neutron),
        ],
        conf_dir: api.data_dir().to_path_buf(),
        regions: Mutex::new(BTreeSet::new()),
        token_users: Mutex::new(BTreeMap::new()),
        other: OtherWriter::default(),
    };
    let figures = std::thread::scope(|s| {
        // Stops the other writer when the run ends, also by a panic.
        let _stop = chaos::StopOnDrop(&os.other.stop);
        let (os, seed) = (&os, settings.seed);
        s.spawn(move || os.other_writer(seed));
        chaos::run(settings, &mut api, &identity, os)
    });
    drop(os);
    drop(cloud);
    figures
}

fn instance(id: usize) -> String {
    format!("chaos-inst-{id}")
}

struct OpenStack<'a> {
    cloud: &'a RealCloud,
    mode: Mode,
    router: String,
    /// Machine `id`'s port at `id - 1`.
    ports: Vec<String>,
    layers: [HttpFaultLayer; 2],
    conf_dir: PathBuf,
    /// The catalog regions made so far, by the fault proxy they point at.
    regions: Mutex<BTreeSet<SocketAddr>>,
    token_users: Mutex<BTreeMap<String, Option<String>>>,
    other: OtherWriter,
}

/// What the other writer left, and its stop signal.
#[derive(Default)]
struct OtherWriter {
    stop: AtomicBool,
    stopped: AtomicBool,
    routes: Mutex<BTreeSet<String>>,
    /// By port.
    vips: Mutex<BTreeMap<String, BTreeSet<String>>>,
    writes: Mutex<u32>,
    refused: Mutex<u32>,
}

impl OpenStack<'_> {
    /// Adds and removes routes and VIPs until told to stop; each change made whole
    /// (retried through Neutron's restart) before the next.
    fn other_writer(&self, seed: u64) {
        // Said also when a change panics, so that the run's end does not wait for ever.
        let _stopped = chaos::StopOnDrop(&self.other.stopped);
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x0057_ac1e);
        while !self.other.stop.load(Ordering::SeqCst) {
            if rng.random_range(0..3u32) == 0 {
                let route = OTHER_ROUTES[rng.random_range(0..OTHER_ROUTES.len())];
                let present = !self.other_routes().contains(route);
                self.other_route(route, present);
                let mut routes = self.other.routes.lock().expect("routes");
                if present {
                    routes.insert(route.to_string());
                } else {
                    routes.remove(route);
                }
            } else {
                let port = &self.ports[rng.random_range(0..self.ports.len())];
                let vip = OTHER_VIPS[rng.random_range(0..OTHER_VIPS.len())];
                let present = !self
                    .other
                    .vips
                    .lock()
                    .expect("vips")
                    .get(port)
                    .is_some_and(|v| v.contains(vip));
                self.other_vip(port, vip, present);
                let mut vips = self.other.vips.lock().expect("vips");
                let on_port = vips.entry(port.clone()).or_default();
                if present {
                    on_port.insert(vip.to_string());
                } else {
                    on_port.remove(vip);
                }
            }
            *self.other.writes.lock().expect("writes") += 1;
            std::thread::sleep(Duration::from_millis(rng.random_range(50..300)));
        }
    }

    /// After a reply that did not make the change: counts a 412, waits a little
    /// after a failure of the moment (Neutron restarting, a 5xx), and panics on any
    /// other answer, or when Neutron has not taken the change within [`OTHER_PATIENCE`].
    fn other_retry(&self, what: &str, reply: Result<Reply, String>, since: Instant) {
        match reply {
            Ok(r) if r.status == 412 => *self.other.refused.lock().expect("refused") += 1,
            Ok(r) if r.status < 500 && r.status != 429 => {
                panic!("the other writer's {what}: HTTP {}: {}", r.status, r.body)
            }
            failed => {
                assert!(
                    since.elapsed() < OTHER_PATIENCE,
                    "the other writer's {what} not taken within {OTHER_PATIENCE:?}: {:?}",
                    failed.map(|r| (r.status, r.body))
                );
                std::thread::sleep(Duration::from_millis(300));
            }
        }
    }

    fn other_routes(&self) -> BTreeSet<String> {
        self.other.routes.lock().expect("routes").clone()
    }

    /// Makes `destination` via [`FOREIGN_HOP`] present or absent, as a client of
    /// this Neutron's mode does it.
    fn other_route(&self, destination: &str, present: bool) {
        let member = self.cloud.member();
        let base = member.neutron_url().to_string();
        let route = json!({"destination": destination, "nexthop": FOREIGN_HOP});
        let since = Instant::now();
        loop {
            let reply = match self.mode {
                Mode::Atomic => {
                    let call = if present {
                        "add_extraroutes"
                    } else {
                        "remove_extraroutes"
                    };
                    member.try_request(
                        "PUT",
                        &base,
                        &format!("/v2.0/routers/{}/{call}", self.router),
                        Some(&json!({"router": {"routes": [route]}})),
                        None,
                    )
                }
                Mode::WithoutAtomic => {
                    let path = format!("/v2.0/routers/{}", self.router);
                    let now = member.try_request("GET", &base, &path, None, None);
                    match now {
                        Ok(r) if r.status == 200 => {
                            let router = &r.body["router"];
                            let mut routes: Vec<Value> = router["routes"]
                                .as_array()
                                .cloned()
                                .unwrap_or_default()
                                .into_iter()
                                .filter(|r| r != &route)
                                .collect();
                            if present {
                                routes.push(route.clone());
                            }
                            member.try_request(
                                "PUT",
                                &base,
                                &path,
                                Some(&json!({"router": {"routes": routes}})),
                                Some(member.revision(router)),
                            )
                        }
                        other => other,
                    }
                }
            };
            match reply {
                Ok(r) if r.status == 200 => return,
                other => self.other_retry(&format!("route {destination}"), other, since),
            }
        }
    }

    /// Makes `vip` present on `port` or absent: the port read, then written with
    /// `If-Match`, read again on 412.
    fn other_vip(&self, port: &str, vip: &str, present: bool) {
        let member = self.cloud.member();
        let base = member.neutron_url().to_string();
        let path = format!("/v2.0/ports/{port}");
        let what = format!("VIP {vip} on port {port}");
        let since = Instant::now();
        loop {
            let now = match member.try_request("GET", &base, &path, None, None) {
                Ok(r) if r.status == 200 => r.body["port"].clone(),
                other => {
                    self.other_retry(&what, other, since);
                    continue;
                }
            };
            let mut pairs: Vec<String> = openstack_real::pairs_of(&now)
                .into_iter()
                .filter(|p| p != vip)
                .collect();
            if present {
                pairs.push(vip.to_string());
            }
            match member.put_pairs_try(port, &pairs, Some(member.revision(&now))) {
                Ok(r) if r.status == 200 => return,
                other => self.other_retry(&what, other, since),
            }
        }
    }

    /// The user a token was issued to, asked of Keystone once per token.
    fn token_user(&self, token: &str) -> Option<String> {
        let mut users = self.token_users.lock().expect("token users");
        users
            .entry(token.to_string())
            .or_insert_with(|| self.cloud.token_user(token))
            .clone()
    }
}

impl Cloud for OpenStack<'_> {
    fn name(&self) -> &'static str {
        match self.mode {
            Mode::Atomic => "openstack",
            Mode::WithoutAtomic => "openstack-without-atomic",
        }
    }

    fn upstream(&self, slot: usize) -> SocketAddr {
        self.layers[slot].addr()
    }

    fn credential(&self, slot: usize, n: u32) -> String {
        let user = format!("chaos-{}-{n}", ["a", "b"][slot]);
        self.cloud.add_member_user(&user);
        user
    }

    fn configure(&self, spawn: Spawn, credential: &str, endpoint: SocketAddr) -> Spawn {
        let region = format!("chaos-{}", endpoint.port());
        if self.regions.lock().expect("regions").insert(endpoint) {
            self.cloud
                .add_neutron_region(&region, &format!("http://{endpoint}"));
        }
        let conf = self.conf_dir.join(format!("{credential}.cloud.conf"));
        let text = format!(
            "[Global]\nauth-url = {}/v3\nregion = {region}\nusername = {credential}\n\
             password = {MEMBER_PASSWORD}\ntenant-name = {PROJECT}\ndomain-id = default\n\
             [Route]\nrouter-id = {}\n",
            self.cloud.keystone_url, self.router
        );
        std::fs::write(&conf, text).expect("write the replica's cloud.conf");
        spawn
            .arg("--cloud-provider=openstack")
            .arg(format!("--cloud-config={}", conf.display()))
            .arg("--cluster-name=e2e-chaos")
    }

    fn machine(&self, id: usize) -> Machine {
        Machine {
            node_name: format!("chaos-{id}"),
            provider_id: format!("openstack:///{}", instance(id)),
            ip: machine_ip(id),
        }
    }

    fn inject(&self, rng: &mut SmallRng) -> &'static str {
        let writes: [&str; 2] = match self.mode {
            Mode::Atomic => [
                ["routers.add_extraroutes", "routers.remove_extraroutes"][rng.random_range(0..2)],
                "ports.update",
            ],
            Mode::WithoutAtomic => ["routers.update", "ports.update"],
        };
        let write = writes[rng.random_range(0..2)];
        let (action, times, answer, name) = match rng.random_range(0..4u32) {
            0 => (
                None,
                rng.random_range(1..=3),
                Answer::Throttle,
                "cloud 429 (any call)",
            ),
            1 => (
                Some(write),
                1,
                Answer::InternalError,
                "cloud 500 on a write",
            ),
            2 => (Some(write), 1, Answer::Unavailable, "cloud 503 on a write"),
            _ => (
                Some(write),
                1,
                Answer::LoseReply,
                "cloud reply lost after the change",
            ),
        };
        // One fault waits at a time: a replica starting alone behind its layer would
        // otherwise meet every 429 queued while it was down (its readiness waits for
        // Neutron's extensions).
        for layer in &self.layers {
            layer.clear();
            layer.inject(action, times, answer);
        }
        name
    }

    fn stop_faults(&self) {
        for layer in &self.layers {
            layer.clear();
        }
        self.other.stop.store(true, Ordering::SeqCst);
        while !self.other.stopped.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let vips = self.other.vips.lock().expect("vips");
        eprintln!(
            "[chaos] the other writer made {} changes ({} refused with 412 and made again); \
             it left {} routes and {} VIPs on {} ports",
            self.other.writes.lock().expect("writes"),
            self.other.refused.lock().expect("refused"),
            self.other_routes().len(),
            vips.values().map(BTreeSet::len).sum::<usize>(),
            vips.values().filter(|v| !v.is_empty()).count(),
        );
    }

    /// Every route of the router, and every pair of the node ports; empty while
    /// Neutron does not answer.
    fn routes(&self) -> BTreeSet<String> {
        let member = self.cloud.member();
        let base = member.neutron_url().to_string();
        let mut out = BTreeSet::new();
        let Ok(router) = member.try_request(
            "GET",
            &base,
            &format!("/v2.0/routers/{}", self.router),
            None,
            None,
        ) else {
            return BTreeSet::new();
        };
        for r in router.body["router"]["routes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            out.insert(format!(
                "route {} -> {}",
                r["destination"].as_str().unwrap_or_default(),
                r["nexthop"].as_str().unwrap_or_default()
            ));
        }
        for (i, port) in self.ports.iter().enumerate() {
            let Ok(reply) =
                member.try_request("GET", &base, &format!("/v2.0/ports/{port}"), None, None)
            else {
                return BTreeSet::new();
            };
            for pair in openstack_real::pairs_of(&reply.body["port"]) {
                out.insert(format!("machine {} pair {pair}", i + 1));
            }
        }
        out
    }

    fn want(&self, machines: &BTreeSet<usize>) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        out.insert(format!("route {FOREIGN} -> {FOREIGN_HOP}"));
        for route in self.other_routes() {
            out.insert(format!("route {route} -> {FOREIGN_HOP}"));
        }
        for &id in machines {
            out.insert(format!(
                "route {} -> {}",
                chaos::pod_cidr(id),
                machine_ip(id)
            ));
            out.insert(format!("machine {id} pair {}", chaos::pod_cidr(id)));
        }
        let vips = self.other.vips.lock().expect("vips");
        for (i, port) in self.ports.iter().enumerate() {
            for vip in vips.get(port).into_iter().flatten() {
                out.insert(format!("machine {} pair {vip}", i + 1));
            }
        }
        out
    }

    /// Unobservable while Neutron restarts: counted as there.
    fn foreign_intact(&self) -> bool {
        let member = self.cloud.member();
        match member.try_request(
            "GET",
            member.neutron_url(),
            &format!("/v2.0/routers/{}", self.router),
            None,
            None,
        ) {
            Ok(r) if r.status == 200 => {
                r.body["router"]["routes"].as_array().is_some_and(|routes| {
                    routes
                        .iter()
                        .any(|r| r["destination"] == FOREIGN && r["nexthop"] == FOREIGN_HOP)
                })
            }
            _ => true,
        }
    }

    /// Each route a write names is a write of its own (`add_extraroutes` and
    /// `remove_extraroutes` name theirs); a whole-list or port update names none.
    /// Neutron answers an existing route's add and a missing route's remove with
    /// success, so no write counts as a duplicate.
    fn writes(&self) -> Vec<CloudWrite> {
        let mut out = Vec::new();
        for e in self.layers.iter().flat_map(HttpFaultLayer::log) {
            if !e.reached_cloud() || !WRITES.contains(&e.action.as_str()) {
                continue;
            }
            let credential = self.token_user(&e.key_id).unwrap_or_else(|| {
                format!(
                    "a token Keystone does not know ({} characters)",
                    e.key_id.len()
                )
            });
            let body: Value = e
                .params
                .get("body")
                .and_then(|b| serde_json::from_str(b).ok())
                .unwrap_or(Value::Null);
            let id = e.params.get("id").cloned().unwrap_or_default();
            let named: Vec<String> = match e.action.as_str() {
                "routers.add_extraroutes" | "routers.remove_extraroutes" => {
                    body["router"]["routes"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|r| r["destination"].as_str().map(str::to_string))
                        .collect()
                }
                _ => Vec::new(),
            };
            let what = |d: &str| {
                format!(
                    "{} {id} {d} ({} {})",
                    e.action,
                    e.status,
                    e.code.as_deref().unwrap_or("ok")
                )
            };
            if named.is_empty() {
                out.push(CloudWrite {
                    credential: credential.clone(),
                    at: e.at,
                    what: what(""),
                    destination: None,
                    duplicate_create: false,
                    double_delete: false,
                });
            }
            for d in named {
                out.push(CloudWrite {
                    credential: credential.clone(),
                    at: e.at,
                    what: what(&d),
                    destination: Some(d),
                    duplicate_create: false,
                    double_delete: false,
                });
            }
        }
        out
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn restart(&self) -> Option<&'static str> {
        self.cloud.restart_neutron(Duration::from_millis(500));
        Some("Neutron stopped and started again")
    }
}
