//! End to end: a cloud reply held back across a lease handover. Two `route-controller`
//! processes with leader election on a real kube-apiserver; the leader `a` reaches the
//! API server and the cloud through fault proxies of its own. While the first reply of
//! a route change of `a` is held (Hetzner: the `add_route` POST; AWS: the
//! `ModifyInstanceAttribute` before the `CreateRoute`), `a` gets SIGTERM (a rolling
//! update) and its API server connection stalls, so it loses the lease while it
//! drains; the node is deleted; `b` takes over and acts; then the held reply is
//! released. Asserted from the cloud's own request log, per replica (the Hetzner
//! double logs the token; for moto each replica has its own proxy, which logs the
//! actions it passes on): `a` sent nothing after its lease was lost (renew deadline
//! after the stall at the latest), the routes converge within seconds, and `a` exits 0
//! (SIGTERM, whatever happened to the lease during the drain).
//!
//! Before fencing, `a`'s worker sent the next request of the change as soon as the
//! held reply arrived: the Hetzner test saw `a`'s action polls after the handover,
//! the AWS test its `CreateRoute`, which recreated the route of the deleted node
//! behind the new leader's back.
//!
//! Real clocks on a loaded machine: the bounds are wide and the measured values are
//! printed (`cargo test --test e2e_fencing -- --nocapture`).

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
#[path = "support/moto.rs"]
mod moto;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{Identity, create_node, delete_node, poll_until};
use e2e_hcloud::{HcloudCluster, WATCH_MODE, token};
use fault_proxy::{FaultProxy, Mode};
use kube_apiserver::KubeApiserver;
use moto::Moto;

const PATIENCE: Duration = Duration::from_secs(30);
/// Short lease settings: the handover takes a few seconds, well within the 10 s a
/// SIGTERM'd replica drains for.
const LEASE_FLAGS: [&str; 3] = [
    "--leader-elect-lease-duration=3s",
    "--leader-elect-renew-deadline=2s",
    "--leader-elect-retry-period=1s",
];
/// The old leader's fence closes at most this long after its API server connection
/// stalled: its last renewal was sent before the stall.
const RENEW_DEADLINE: Duration = Duration::from_secs(2);
/// Convergence after the held reply is released, on a loaded two-core machine.
const CONVERGED_WITHIN: Duration = Duration::from_secs(5);
/// How long a late request of the old leader is waited for after the release.
const LATE_WINDOW: Duration = Duration::from_secs(2);

fn address(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .trim_end_matches("/v1")
        .parse()
        .unwrap_or_else(|e| panic!("{url:?} is not host:port: {e}"))
}

/// The old leader `a`'s own way to the API server, through `proxy`.
fn via(spawn: Spawn, proxy: &FaultProxy) -> Spawn {
    spawn.arg(format!("--master=https://{}", proxy.addr()))
}

/// What happened around the handover, for the assertions and the printout.
struct Handover {
    /// When `a`'s API server connection stalled (and it got SIGTERM).
    stalled: Instant,
    /// When `b` had acted as the leader (its first pass done, `removed` true).
    acted: Instant,
    /// When `a`'s held reply was released.
    released: Instant,
}

/// Stalls `a`'s API server connection (`kube_a`) and SIGTERMs it, deletes `node`,
/// waits for `b`'s first pass as leader and for `removed`, then releases `a`'s held
/// replies (`cloud_a`).
fn hand_over(
    a: &mut ControllerProcess,
    b: &mut ControllerProcess,
    (kube_a, cloud_a): (&FaultProxy, &FaultProxy),
    api: &KubeApiserver,
    node: &str,
    removed: impl Fn() -> bool,
) -> Handover {
    let stalled = Instant::now();
    kube_a.set(Mode::Stall);
    a.send_signal("TERM");
    delete_node(api, node);
    b.wait_for_log("became leader", PATIENCE);
    if poll_until(PATIENCE, || removed().then_some(())).is_none() {
        b.fail(&format!(
            "the new leader did not act on the deletion of {node}"
        ));
    }
    let acted = Instant::now();
    let released = Instant::now();
    cloud_a.set(Mode::Pass);
    Handover {
        stalled,
        acted,
        released,
    }
}

/// After the release: the routes converge within [`CONVERGED_WITHIN`], `a` exits 0
/// (SIGTERM), and the routes are still converged once a late request of `a` would
/// have landed.
fn settle(handover: &Handover, a: &mut ControllerProcess, converged: impl Fn() -> bool) {
    let took = poll_until(CONVERGED_WITHIN, || {
        converged().then(|| handover.released.elapsed())
    });
    let Some(took) = took else {
        a.fail(&format!(
            "the routes did not converge within {CONVERGED_WITHIN:?} of the release"
        ));
    };
    match a.wait_exit(PATIENCE) {
        Some(status) if status.success() => {}
        Some(status) => a.fail(&format!(
            "after SIGTERM and a lost lease the old leader exited with {status}"
        )),
        None => a.fail("the old leader did not exit after SIGTERM"),
    }
    let exited = handover.stalled.elapsed();
    std::thread::sleep(LATE_WINDOW);
    let since = |t: Instant| (t - handover.stalled).as_secs_f64();
    eprintln!(
        "handover: b acted {:.2} s after a's stall and SIGTERM; a's reply released at {:.2} s; \
         converged {:.2} s after the release; a exited 0 at {:.2} s",
        since(handover.acted),
        since(handover.released),
        took.as_secs_f64(),
        exited.as_secs_f64()
    );
    assert!(
        converged(),
        "a late write undid the convergence after the old leader's reply was released"
    );
}

/// `a`'s requests after its fence closed at the latest, as `what at seconds after the
/// stall`.
fn late(handover: &Handover, requests: impl IntoIterator<Item = (Instant, String)>) -> Vec<String> {
    let fence_closed = handover.stalled + RENEW_DEADLINE;
    requests
        .into_iter()
        .filter(|(at, _)| *at > fence_closed)
        .map(|(at, what)| format!("{what} at {:.2} s", (at - handover.stalled).as_secs_f64()))
        .collect()
}

#[test]
fn hcloud_an_old_leader_sends_nothing_after_losing_the_lease_while_its_reply_is_held() {
    let cluster = HcloudCluster::start("e2e-fence-hcloud", 81..=82);
    let hetzner = &cluster.hetzner;
    let (token_a, token_b) = (token("fence-a"), token("fence-b"));
    hetzner.double.add_token(&token_a);
    hetzner.double.add_token(&token_b);
    let kube_a = FaultProxy::start(address(cluster.api.server()));
    let cloud_a = FaultProxy::start(address(&hetzner.double.endpoint()));
    let mut a = via(cluster.controller_with_token(&token_a), &kube_a)
        .env("HCLOUD_ENDPOINT", format!("http://{}/v1", cloud_a.addr()))
        .arg(WATCH_MODE)
        .args(LEASE_FLAGS)
        .spawn("fence_hcloud_a");
    a.wait_for_metric("route_controller_leader", &[], 1.0, PATIENCE);
    let mut b = cluster
        .controller_with_token(&token_b)
        .arg(WATCH_MODE)
        .args(LEASE_FLAGS)
        .spawn("fence_hcloud_b");
    b.wait_ready(PATIENCE);
    let first = cluster.node("fence-h-1", 81);
    // Its pass done: the action followed to its end (Hetzner runs one at a time).
    a.wait_for_log("routes created 1", PATIENCE);
    assert!(hetzner.has_route(&first.cidr, &first.gateway));

    cloud_a.set(Mode::HoldReplies);
    let second = cluster.node("fence-h-2", 82);
    let posted = poll_until(PATIENCE, || {
        (!hetzner.add_route_requests(&second.cidr).is_empty()).then_some(())
    });
    if posted.is_none() {
        a.fail(&format!(
            "the leader sent no add_route for the second node: {:?}",
            hetzner.double.requests()
        ));
    }
    // The double made the route at the POST: the new leader deletes it.
    let handover = hand_over(
        &mut a,
        &mut b,
        (&kube_a, &cloud_a),
        &cluster.api,
        &second.name,
        || !hetzner.has_route_to(&second.cidr),
    );
    settle(&handover, &mut a, || {
        hetzner.routes() == vec![(first.cidr.clone(), first.gateway.clone())]
    });
    let requests_of_a = hetzner
        .double
        .requests()
        .into_iter()
        .filter(|r| r.token == token_a)
        .map(|r| (r.at, format!("{} {}?{}", r.method, r.path, r.query)));
    let late = late(&handover, requests_of_a);
    assert!(
        late.is_empty(),
        "the old leader sent requests after its lease was lost: {late:?}"
    );
    assert_eq!(
        hetzner.add_route_requests(&second.cidr).len(),
        1,
        "only a's one add_route for the deleted node"
    );
    b.terminate();
}

#[test]
fn aws_an_old_leader_sends_no_create_route_after_losing_the_lease_while_its_reply_is_held() {
    const CLUSTER_NAME: &str = "e2e-fence-aws";
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let ec2 = moto.ec2();
    let network = moto::network(&ec2);
    let tag = format!("kubernetes.io/cluster/{CLUSTER_NAME}");
    let table = ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]);
    let first = ec2.run_instance(&network.ami, &network.subnet);
    let second = ec2.run_instance(&network.ami, &network.subnet);
    let identity = Identity::provision(&api, "e2e-fence-aws");
    let kube_a = FaultProxy::start(address(api.server()));
    // One proxy per replica: each logs the actions of its replica only.
    let (cloud_a, cloud_b) = (
        FaultProxy::start(address(moto.url())),
        FaultProxy::start(address(moto.url())),
    );
    let replica = |cloud: &FaultProxy| {
        Spawn::new()
            .arg("--cloud-provider=aws")
            .arg(format!("--cluster-name={CLUSTER_NAME}"))
            .arg("--cluster-cidr=10.244.0.0/16")
            .arg(WATCH_MODE)
            .args(LEASE_FLAGS)
            .args(identity.flags())
            .env("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
            .env("AWS_REGION", moto::REGION)
            .env("AWS_ENDPOINT_URL_EC2", format!("http://{}/", cloud.addr()))
            .env("AWS_EC2_METADATA_DISABLED", "true")
    };
    let mut a = via(replica(&cloud_a), &kube_a).spawn("fence_aws_a");
    a.wait_for_metric("route_controller_leader", &[], 1.0, PATIENCE);
    let mut b = replica(&cloud_b).spawn("fence_aws_b");
    b.wait_ready(PATIENCE);
    let routes_to = |cidr: &str| -> Vec<Option<String>> {
        ec2.routes(&table)
            .into_iter()
            .filter(|(d, _, _)| d == cidr)
            .map(|(_, target, _)| target)
            .collect()
    };
    let (first_cidr, second_cidr) = ("10.244.1.0/24", "10.244.2.0/24");
    create_node(
        &api,
        &first.private_dns_name,
        &[first_cidr],
        "10.0.1.10",
        &first.provider_id(),
    );
    a.wait_for_log("routes created 1", PATIENCE);
    assert_eq!(routes_to(first_cidr), vec![Some(first.id.clone())]);

    let modifications = || {
        cloud_a
            .requests()
            .iter()
            .filter(|(_, action)| action == "ModifyInstanceAttribute")
            .count()
    };
    assert_eq!(modifications(), 1, "the first node's instance");
    cloud_a.set(Mode::HoldReplies);
    create_node(
        &api,
        &second.private_dns_name,
        &[second_cidr],
        "10.0.1.11",
        &second.provider_id(),
    );
    let modifying = poll_until(PATIENCE, || (modifications() == 2).then_some(()));
    if modifying.is_none() {
        a.fail(&format!(
            "the leader sent no ModifyInstanceAttribute for the second node: {:?}",
            cloud_a.requests()
        ));
    }
    // The second node never had a route: the new leader's first pass has nothing to do.
    let handover = hand_over(
        &mut a,
        &mut b,
        (&kube_a, &cloud_a),
        &api,
        &second.private_dns_name,
        || true,
    );
    settle(&handover, &mut a, || {
        routes_to(first_cidr) == vec![Some(first.id.clone())] && routes_to(second_cidr).is_empty()
    });
    let actions = |proxy: &FaultProxy| -> Vec<String> {
        proxy.requests().into_iter().map(|(_, a)| a).collect()
    };
    eprintln!(
        "aws: the old leader's requests: {:?}; the new leader's: {:?}",
        actions(&cloud_a),
        actions(&cloud_b)
    );
    let late = late(&handover, cloud_a.requests());
    assert!(
        late.is_empty(),
        "the old leader sent requests after its lease was lost: {late:?}"
    );
    b.terminate();
}
