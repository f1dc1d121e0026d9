//! End to end: two `route-controller` processes with leader election on one Lease of
//! a real kube-apiserver, each with its own Hetzner token, so that every cloud write
//! in the double's log is attributable to one of them.
//!
//! Short lease settings keep the tests fast: lease 4 s, renew deadline 3 s, retry
//! 1 s. A candidate retries every retry period plus up to 1.2 × that as jitter (as
//! client-go), and measures expiry from when it last *saw* the lease change, with its
//! own clock. So after the leader dies, the standby cannot take over before the
//! leader's last renewal + lease duration (at least lease − retry after the kill),
//! and takes over at most two jittered retry intervals later than the lease's expiry:
//! one to have seen that last renewal, one to notice the expiry.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/e2e_hcloud.rs"]
mod e2e_hcloud;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;

use std::time::{Duration, Instant, SystemTime};

use controller_process::{ControllerProcess, sum};
use e2e_cluster::{LEASE, poll_until};
use e2e_hcloud::{HcloudCluster, TestNode, WATCH_MODE, token};
use kube_apiserver::Version;

const PATIENCE: Duration = Duration::from_secs(30);
const LEASE_DURATION: Duration = Duration::from_secs(4);
const RETRY_PERIOD: Duration = Duration::from_secs(1);
/// The longest wait between two attempts of a candidate: retry × (1 + 1.2).
const LONGEST_RETRY: Duration = Duration::from_millis(2200);
/// HTTP round trips, process scheduling and scrape intervals on a loaded two-core
/// machine (five engineers compiling at once): wide on purpose. The timing rules
/// themselves are pinned in virtual time (`kube::lease`'s unit tests and
/// `tests/kube_lease.rs`); here they only must hold roughly, and the measured values
/// are printed (`cargo test --test e2e_leader_election -- --nocapture`).
const SLACK: Duration = Duration::from_secs(3);
const LEASE_FLAGS: [&str; 3] = [
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];

/// Two replicas: `a` leads (started first and waited for), `b` stands by.
struct Pair {
    cluster: HcloudCluster,
    a: ControllerProcess,
    b: ControllerProcess,
    token_a: String,
    token_b: String,
}

fn start_pair(
    version: Version,
    namespace: &str,
    servers: std::ops::RangeInclusive<u64>,
    label: &str,
) -> Pair {
    let cluster = HcloudCluster::start_on(version, namespace, servers);
    let label = format!("{label}-1.{}", version.minor());
    let (token_a, token_b) = (token("replica-a"), token("replica-b"));
    cluster.hetzner.double.add_token(&token_a);
    cluster.hetzner.double.add_token(&token_b);
    let replica = |token: &str, name: &str| {
        cluster
            .controller_with_token(token)
            .arg(WATCH_MODE)
            .args(LEASE_FLAGS)
            .spawn(&format!("{label}_{name}"))
    };
    let mut a = replica(&token_a, "a");
    a.wait_for_metric("route_controller_leader", &[], 1.0, PATIENCE);
    let mut b = replica(&token_b, "b");
    b.wait_ready(PATIENCE);
    if b.metric("route_controller_leader", &[]) != 0.0 {
        b.fail("the second replica leads although the first holds the lease");
    }
    Pair {
        cluster,
        a,
        b,
        token_a,
        token_b,
    }
}

impl Pair {
    fn wait_for_route(&mut self, node: &TestNode, writer: &str) {
        let hetzner = &self.cluster.hetzner;
        if poll_until(PATIENCE, || {
            hetzner.has_route(&node.cidr, &node.gateway).then_some(())
        })
        .is_none()
        {
            let ctl = if writer == "a" {
                &mut self.a
            } else {
                &mut self.b
            };
            ctl.fail(&format!(
                "no route for {} after {PATIENCE:?}: {:?}",
                node.name,
                hetzner.routes()
            ));
        }
    }

    /// Who sent the `add_route` of `node`: "a" or "b" (exactly one request).
    fn creator(&self, node: &TestNode) -> &'static str {
        let requests = self.cluster.hetzner.add_route_requests(&node.cidr);
        assert_eq!(
            requests.len(),
            1,
            "one add_route for {}: {requests:?}",
            node.name
        );
        match &requests[0].token {
            t if *t == self.token_a => "a",
            t if *t == self.token_b => "b",
            other => panic!(
                "add_route for {} with an unknown token {other:?}",
                node.name
            ),
        }
    }

    /// No write of `old` after the first write of `new`, and `new` wrote nothing
    /// while `old` led (before `handover`).
    fn assert_writes_never_overlap(&self, handover: Instant) {
        let writes_a = self.cluster.hetzner.writes_by(&self.token_a);
        let writes_b = self.cluster.hetzner.writes_by(&self.token_b);
        assert!(!writes_a.is_empty() && !writes_b.is_empty());
        let first_b = writes_b.iter().map(|r| r.at).min().expect("b wrote");
        let last_a = writes_a.iter().map(|r| r.at).max().expect("a wrote");
        assert!(
            last_a < first_b,
            "the old leader wrote {:?} after the new leader's first write",
            last_a - first_b
        );
        assert!(
            first_b > handover,
            "the standby wrote before the leader was gone"
        );
    }
}

fn leader_since(ctl: &mut ControllerProcess, from: Instant, timeout: Duration) -> Duration {
    ctl.wait_for_metric("route_controller_leader", &[], 1.0, timeout);
    from.elapsed()
}

impl Pair {
    fn lease(&self) -> serde_json::Value {
        self.cluster.api.get_json(&format!(
            "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{LEASE}",
            self.cluster.identity.namespace
        ))
    }
}

/// A MicroTime field of a lease's spec (`renewTime`, `acquireTime`), as wall-clock time:
/// both replicas write them from this machine's clock.
fn lease_time(lease: &serde_json::Value, field: &str) -> SystemTime {
    let text = lease["spec"][field]
        .as_str()
        .unwrap_or_else(|| panic!("lease without spec.{field}: {lease}"));
    let ts: k8s_openapi::jiff::Timestamp = text
        .parse()
        .unwrap_or_else(|e| panic!("spec.{field} {text:?}: {e}"));
    let micros = u64::try_from(ts.as_microsecond()).expect("a time after 1970");
    SystemTime::UNIX_EPOCH + Duration::from_micros(micros)
}

fn between(earlier: SystemTime, later: SystemTime) -> Duration {
    later
        .duration_since(earlier)
        .unwrap_or_else(|e| panic!("{:?} is before the time it should follow", e.duration()))
}

#[test]
fn standby_takes_over_from_a_killed_leader_after_the_lease_expires_and_never_writes_alongside_it() {
    killed_leader(Version::Current);
}

/// The same on Kubernetes 1.31 (the version matrix).
#[test]
fn standby_takes_over_from_a_killed_leader_after_the_lease_expires_and_never_writes_alongside_it_on_1_31()
 {
    killed_leader(Version::V1_31);
}

fn killed_leader(version: Version) {
    let mut pair = start_pair(version, "e2e-leader-kill", 61..=63, "leader_kill");
    let first = pair.cluster.node("leader-kill-1", 61);
    pair.wait_for_route(&first, "a");
    let second = pair.cluster.node("leader-kill-2", 62);
    pair.wait_for_route(&second, "a");
    assert_eq!(pair.creator(&first), "a");
    assert_eq!(pair.creator(&second), "a");
    assert!(
        pair.cluster.hetzner.writes_by(&pair.token_b).is_empty(),
        "the standby wrote while the leader was alive"
    );
    assert_eq!(
        pair.b.metric_sum(
            "route_controller_cloud_requests_total",
            &[("provider", "hcloud")]
        ),
        0.0,
        "the standby made no route calls at all"
    );

    let killed = Instant::now();
    pair.a.kill();
    // The dead leader's last renewal, as it wrote it.
    let last_renewal = lease_time(&pair.lease(), "renewTime");
    // A change during the failover: the new leader must serve it.
    let third = pair.cluster.node("leader-kill-3", 63);
    let takeover = leader_since(&mut pair.b, killed, PATIENCE);
    let acquired = lease_time(&pair.lease(), "acquireTime");
    let after_renewal = between(last_renewal, acquired);
    eprintln!(
        "leader_kill: the standby led {:.2} s after the SIGKILL, acquiring the lease {:.2} s after \
         the dead leader's last renewal (lease {LEASE_DURATION:?}, retry {RETRY_PERIOD:?})",
        takeover.as_secs_f64(),
        after_renewal.as_secs_f64()
    );
    // Safety, whatever the load: the standby measures expiry from when it saw that
    // renewal, which is after it was written.
    assert!(
        after_renewal >= LEASE_DURATION,
        "the standby took the lease {after_renewal:?} after the last renewal, before it expired"
    );
    // The standby saw the leader's last renewal at most one of its attempt intervals
    // after it happened, and wakes when the lease it saw runs out (client-go waits up
    // to another interval on top).
    let latest = LEASE_DURATION + LONGEST_RETRY + SLACK;
    assert!(
        after_renewal <= latest,
        "the standby took the lease {after_renewal:?} after the last renewal; at most {latest:?} expected"
    );
    pair.wait_for_route(&third, "b");
    assert_eq!(pair.creator(&third), "b");
    pair.assert_writes_never_overlap(killed);

    let lease = pair.lease();
    let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default();
    assert!(
        !holder.is_empty() && pair.b.log().contains(&format!("({holder}) acquired lease")),
        "the lease names the standby as holder: {lease}"
    );
    pair.b.terminate();
}

#[test]
fn sigterm_releases_the_lease_so_the_standby_takes_over_at_once() {
    terminated_leader(Version::Current);
}

/// The same on Kubernetes 1.31 (the version matrix).
#[test]
fn sigterm_releases_the_lease_so_the_standby_takes_over_at_once_on_1_31() {
    terminated_leader(Version::V1_31);
}

fn terminated_leader(version: Version) {
    let mut pair = start_pair(version, "e2e-leader-term", 71..=72, "leader_term");
    let first = pair.cluster.node("leader-term-1", 71);
    pair.wait_for_route(&first, "a");
    assert_eq!(pair.creator(&first), "a");

    let terminated = Instant::now();
    let signalled = SystemTime::now();
    let exit = pair.a.terminate();
    let takeover = leader_since(&mut pair.b, terminated, PATIENCE);
    let acquired = between(signalled, lease_time(&pair.lease(), "acquireTime"));
    eprintln!(
        "leader_term: the leader exited {:.2} s after SIGTERM; the standby led {:.2} s after it \
         (acquired the lease {:.2} s after the signal)",
        exit.as_secs_f64(),
        takeover.as_secs_f64(),
        acquired.as_secs_f64()
    );
    assert!(
        pair.a.log().contains(&format!(
            "released lease {}/{LEASE}",
            pair.cluster.identity.namespace
        )),
        "the stopped leader did not release the lease:\n{}",
        pair.a.log_tail()
    );
    // The released lease is free: the standby's next attempt takes it, without waiting
    // for it to expire.
    let latest = exit + LONGEST_RETRY + SLACK;
    assert!(
        acquired <= latest,
        "the standby took the lease {acquired:?} after the SIGTERM; a released lease is taken at \
         the next attempt (≤ {latest:?})"
    );
    let second = pair.cluster.node("leader-term-2", 72);
    pair.wait_for_route(&second, "b");
    assert_eq!(pair.creator(&second), "b");
    pair.assert_writes_never_overlap(terminated);
    assert_eq!(
        sum(
            &pair.b.scrape(),
            "route_controller_leader_transitions_total",
            &[]
        ),
        1.0
    );
    pair.b.terminate();
}
