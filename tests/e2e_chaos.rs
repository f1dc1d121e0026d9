//! Our own chaos run, the short one (issue 11), with the Hetzner double: the
//! `route-controller` binary as two replicas with leader election against a real
//! kube-apiserver, the cloud behind a TCP fault proxy, and for a bounded, seeded
//! while: node churn, the proxy stalling, cutting, refusing and holding replies, the
//! double failing actions and answering 429, 503 and garbage, replicas SIGKILLed and
//! SIGTERMed (and started again). Then the faults stop and the run checks, over the
//! double's own request log and the Lease as sampled from the API server:
//!
//! - the foreign route (inside the network, outside the cluster CIDR) is never
//!   touched;
//! - every write came from the replica that held the lease when the double got it
//!   (its term runs from its `acquireTime` to the next holder's);
//! - no create of a route that exists (the double answers 400 "overlaps") and no
//!   delete of one that is gone (404);
//! - every SIGTERM ends with exit 0 (`ControllerProcess::terminate` fails otherwise);
//! - the routes converge on the nodes that exist within [`CONVERGENCE`].
//!
//! It prints the faults injected, the writes, the violations and the convergence
//! time. `CHAOS_SEED` and `CHAOS_SECONDS` (default 2 and 20) change the run.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/e2e_hcloud.rs"]
mod e2e_hcloud;
#[path = "support/fault_proxy.rs"]
mod fault_proxy;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use controller_process::ControllerProcess;
use e2e_cluster::{LEASE, delete_node, poll_until};
use e2e_hcloud::{HcloudCluster, NETWORK, WATCH_MODE, pod_cidr, server_ip, token};
use fault_proxy::{FaultProxy, Mode};
use hcloud_double::Fault;

const SERVERS: u64 = 12;
const LEASE_FLAGS: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];
/// Outside the cluster CIDR (10.244.0.0/16), inside the network: never ours.
const FOREIGN: &str = "10.100.0.0/24";
/// After the faults stop: a takeover (lease 4 s + retries), a list, and the creates
/// of up to twelve nodes one action at a time.
const CONVERGENCE: Duration = Duration::from_secs(60);
const PATIENCE: Duration = Duration::from_secs(30);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A replica slot: its token (so its writes are attributable) and the process now
/// running in it.
struct Replica {
    name: &'static str,
    token: String,
    process: ControllerProcess,
    incarnations: u32,
    /// Every lease identity this slot's processes have used.
    identities: BTreeSet<String>,
}

/// One sample of the Lease: holder and its acquireTime (wall clock).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    holder: String,
    acquired: SystemTime,
}

#[test]
fn a_chaos_run_with_the_hetzner_double_keeps_the_invariants_and_converges() {
    let seed: u64 = env_or("CHAOS_SEED", 2);
    let seconds: u64 = env_or("CHAOS_SECONDS", 20);
    let mut rng = SmallRng::seed_from_u64(seed);

    let cluster = HcloudCluster::start("e2e-chaos", 1..=SERVERS);
    let hetzner = &cluster.hetzner;
    hetzner
        .double
        .put_route(NETWORK, FOREIGN, &server_ip(SERVERS + 1));
    let double_addr = hetzner
        .double
        .endpoint()
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .parse()
        .expect("the double's address");
    let proxy = FaultProxy::start(double_addr);
    let endpoint = format!("http://{}/v1", proxy.addr());
    let spawn = |name: &str, token: &str, n: u32| {
        cluster
            .controller_with_token(token)
            .env("HCLOUD_ENDPOINT", endpoint.clone())
            .arg(WATCH_MODE)
            .args(LEASE_FLAGS)
            .spawn(&format!("chaos_{name}_{n}"))
    };
    let mut replicas: Vec<Replica> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let token = token(&format!("chaos-{name}"));
            hetzner.double.add_token(&token);
            let mut process = spawn(name, &token, 0);
            process.wait_ready(PATIENCE);
            Replica {
                name,
                token,
                process,
                incarnations: 0,
                identities: BTreeSet::new(),
            }
        })
        .collect();

    // The Lease, sampled every 50 ms on a thread of its own.
    let terms: Arc<Mutex<Vec<Term>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (agent, url, admin) = (
            cluster.api.agent().clone(),
            format!(
                "{}/apis/coordination.k8s.io/v1/namespaces/{}/leases/{LEASE}",
                cluster.api.server(),
                cluster.identity.namespace
            ),
            cluster.api.admin_token().to_string(),
        );
        let (terms, stop) = (terms.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Some(term) = sample_lease(&agent, &url, &admin) {
                    let mut t = terms.lock().expect("terms");
                    if t.last() != Some(&term) {
                        t.push(term);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    // --- faults ------------------------------------------------------------------
    let mut faults: BTreeMap<&'static str, u32> = BTreeMap::new();
    let mut nodes: BTreeMap<u64, String> = BTreeMap::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        let pick = rng.random_range(0..16u32);
        let kind: &'static str = match pick {
            0..=3 => {
                let id = rng.random_range(1..=SERVERS);
                if nodes.contains_key(&id) {
                    continue;
                }
                let node = cluster.node(&format!("chaos-{id}"), id);
                nodes.insert(id, node.name);
                "node created"
            }
            4 | 5 => {
                let Some(&id) = nodes.keys().nth(rng.random_range(0..nodes.len().max(1))) else {
                    continue;
                };
                delete_node(&cluster.api, &nodes[&id]);
                nodes.remove(&id);
                "node deleted"
            }
            6 => {
                proxy.set(Mode::Stall);
                std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
                proxy.set(Mode::Pass);
                "cloud stalled"
            }
            7 => {
                proxy.set(Mode::HoldReplies);
                std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
                proxy.set(Mode::Pass);
                "cloud replies held"
            }
            8 => {
                proxy.cut();
                "cloud connections cut"
            }
            9 => {
                proxy.set(Mode::Refuse);
                std::thread::sleep(Duration::from_millis(rng.random_range(200..1000)));
                proxy.set(Mode::Pass);
                "cloud refused"
            }
            10 => {
                let command = if rng.random_bool(0.5) {
                    "add_route"
                } else {
                    "delete_route"
                };
                hetzner
                    .double
                    .fail_next_action(command, "action_failed", "chaos");
                "cloud action failed"
            }
            11 => {
                let (fault, what) = match rng.random_range(0..4u32) {
                    0 => (Fault::error(429, "rate_limit_exceeded"), "cloud 429"),
                    1 => (Fault::BareStatus(503), "cloud 503"),
                    2 => (Fault::Garbage, "cloud garbage reply"),
                    _ => (Fault::Close, "cloud closed mid-request"),
                };
                let path = format!("/networks/{NETWORK}/actions/add_route");
                hetzner.double.inject("POST", &path, 1, fault);
                what
            }
            12 | 13 => {
                let r = &mut replicas[rng.random_range(0..2usize)];
                r.identities.extend(identity_of(&r.process));
                if pick == 12 {
                    r.process.kill();
                } else {
                    // Fails the test unless it exits 0.
                    r.process.terminate();
                }
                r.incarnations += 1;
                r.process = spawn(r.name, &r.token, r.incarnations);
                r.process.wait_ready(PATIENCE);
                if pick == 12 {
                    "replica SIGKILLed"
                } else {
                    "replica SIGTERMed"
                }
            }
            _ => {
                std::thread::sleep(Duration::from_millis(300));
                continue;
            }
        };
        *faults.entry(kind).or_default() += 1;
        std::thread::sleep(Duration::from_millis(rng.random_range(50..400)));
    }

    // --- quiet: the routes converge on the nodes that exist ----------------------
    proxy.set(Mode::Pass);
    let quiet = Instant::now();
    let want: BTreeSet<(String, String)> = nodes
        .keys()
        .map(|&id| (pod_cidr((id % 256) as u32), server_ip(id)))
        .collect();
    let ours = || -> BTreeSet<(String, String)> {
        hetzner
            .routes()
            .into_iter()
            .filter(|(d, _)| d != FOREIGN)
            .collect()
    };
    let converged = poll_until(CONVERGENCE, || (ours() == want).then(|| quiet.elapsed()));
    stop.store(true, Ordering::SeqCst);
    let _ = sampler.join();
    for r in &mut replicas {
        r.identities.extend(identity_of(&r.process));
    }

    // --- the request log ----------------------------------------------------------
    let terms = terms.lock().expect("terms").clone();
    let requests = hetzner.double.requests();
    let wall_of = {
        let (now_i, now_w) = (Instant::now(), SystemTime::now());
        move |at: Instant| now_w - now_i.saturating_duration_since(at)
    };
    let mut violations: Vec<String> = Vec::new();
    let mut writes = 0;
    for r in requests.iter().filter(|r| r.method == "POST") {
        writes += 1;
        if r.destination.as_deref() == Some(FOREIGN) {
            violations.push(format!("the foreign route was written: {r:?}"));
        }
        let Some(replica) = replicas.iter().find(|x| x.token == r.token) else {
            violations.push(format!("a write with an unknown token: {r:?}"));
            continue;
        };
        let at = wall_of(r.at);
        let holder = terms
            .iter()
            .rev()
            .find(|t| t.acquired <= at)
            .map(|t| t.holder.as_str())
            .unwrap_or("");
        if !replica.identities.contains(holder) {
            violations.push(format!(
                "replica {} wrote {} {:?} while {holder:?} held the lease",
                replica.name, r.path, r.destination
            ));
        }
        let add = r.path.ends_with("/add_route");
        if add && r.status == 400 {
            violations.push(format!("a create of an existing route: {r:?}"));
        }
        if !add && r.status == 404 {
            violations.push(format!("a delete of a route already gone: {r:?}"));
        }
    }
    if !hetzner.routes().iter().any(|(d, _)| d == FOREIGN) {
        violations.push("the foreign route is gone".into());
    }

    let injected: u32 = faults.values().sum();
    eprintln!(
        "chaos (seed {seed}, {seconds} s): {injected} faults injected {faults:?}; {writes} writes; \
         {} lease terms; {} violations; converged {}",
        terms.len(),
        violations.len(),
        match converged {
            Some(t) => format!("{:.1} s after the faults stopped", t.as_secs_f64()),
            None => format!("not within {CONVERGENCE:?}"),
        }
    );
    for v in &violations {
        eprintln!("  violation: {v}");
    }
    let mut leader = None;
    for r in &mut replicas {
        if r.process.metric("route_controller_leader", &[]) == 1.0 {
            leader = Some(r.name);
        }
    }
    if converged.is_none() {
        panic!(
            "the routes did not converge within {CONVERGENCE:?} (leader {leader:?}):\n want {want:?}\n have {:?}",
            ours()
        );
    }
    assert!(violations.is_empty(), "{} violations", violations.len());
    for r in &mut replicas {
        r.process.terminate();
    }
}

/// The Lease's holder and acquireTime, if it has a holder.
fn sample_lease(agent: &ureq::Agent, url: &str, token: &str) -> Option<Term> {
    let request = ureq::http::Request::builder()
        .uri(url)
        .header("Authorization", format!("Bearer {token}"))
        .body(())
        .ok()?;
    let mut response = agent.run(request).ok()?;
    let body = response.body_mut().read_to_string().ok()?;
    let lease: serde_json::Value = serde_json::from_str(&body).ok()?;
    let holder = lease["spec"]["holderIdentity"].as_str()?.to_string();
    let acquired = lease["spec"]["acquireTime"].as_str()?;
    Some(Term {
        holder,
        acquired: parse_micro_time(acquired)?,
    })
}

/// `2026-12-01T10:00:00.123456Z` (a MicroTime in UTC, as the API server writes it)
/// as a `SystemTime`.
fn parse_micro_time(s: &str) -> Option<SystemTime> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, min, sec) = (t.next()??, t.next()??, t.next()??);
    let micros: u64 = format!("{frac:0<6}")[..6].parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + h * 3600 + min * 60 + sec).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros))
}

#[test]
fn micro_times_parse_as_the_api_server_writes_them() {
    let t = parse_micro_time("2026-12-01T10:00:00.123456Z").expect("parses");
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    assert_eq!(secs, Duration::new(1_796_119_200, 123_456_000));
    assert_eq!(
        parse_micro_time("1970-01-01T00:00:00Z"),
        Some(SystemTime::UNIX_EPOCH)
    );
}

/// The lease identity the process logged when it first acquired the lease.
fn identity_of(process: &ControllerProcess) -> Option<String> {
    let log = process.log();
    let start = log.find("this replica (")? + "this replica (".len();
    let end = log[start..].find(')')? + start;
    Some(log[start..end].to_string())
}
