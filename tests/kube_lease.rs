//! Two electors on one Lease of the fake API server: exactly one leads, the other
//! takes over when the holder stops renewing, and a release on stop hands over at
//! once. (The timing rules themselves are unit-tested with a virtual clock in
//! `kube::lease`; these tests check the wire protocol and the threads.)

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use fake_apiserver::FakeApiServer;
use route_controller::kube::config::{Auth, Secret, TlsSettings};
use route_controller::kube::lease::{LeaseConfig, spawn_leader_election};
use route_controller::kube::{Client, ClientOptions, KubeConfig, StopHandle};

struct Candidate {
    identity: String,
    token: String,
    leadership: Receiver<bool>,
    stop: StopHandle,
    thread: std::thread::JoinHandle<()>,
}

fn candidate(server: &FakeApiServer, name: &str, lease: Duration, renew: Duration) -> Candidate {
    let config = KubeConfig {
        server: server.url(),
        source: "test".into(),
        tls: TlsSettings::default(),
        auth: Auth::Token(Secret::new(format!("token-{name}"))),
        proxy_url: None,
        namespace: "default".into(),
    };
    let client = Client::new(&config, ClientOptions::default()).unwrap();
    let mut lease_config = LeaseConfig::new(format!("host-{name}_{name}"));
    lease_config.lease_duration = lease;
    lease_config.renew_deadline = renew;
    lease_config.retry_period = Duration::from_millis(200);
    let (tx, rx) = crossbeam_channel::unbounded();
    let stop = StopHandle::new();
    let thread = spawn_leader_election(client, lease_config.clone(), tx, stop.clone()).unwrap();
    Candidate {
        identity: lease_config.identity,
        token: format!("token-{name}"),
        leadership: rx,
        stop,
        thread,
    }
}

fn holder(server: &FakeApiServer) -> String {
    server
        .lease("kube-system", "route-controller")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Waits for the first of the two to report leadership; returns (leader, follower).
fn first_leader(a: Candidate, b: Candidate) -> (Candidate, Candidate) {
    crossbeam_channel::select! {
        recv(a.leadership) -> m => { assert_eq!(m, Ok(true)); (a, b) }
        recv(b.leadership) -> m => { assert_eq!(m, Ok(true)); (b, a) }
        default(Duration::from_secs(10)) => panic!("nobody became leader"),
    }
}

#[test]
fn exactly_one_of_two_electors_leads_and_the_other_takes_over_when_it_stops_renewing() {
    let server = FakeApiServer::start();
    let a = candidate(&server, "a", Duration::from_secs(2), Duration::from_secs(1));
    let b = candidate(&server, "b", Duration::from_secs(2), Duration::from_secs(1));
    let (leader, follower) = first_leader(a, b);
    assert_eq!(holder(&server), leader.identity);
    // The follower stays a follower while the leader renews.
    assert!(
        follower
            .leadership
            .recv_timeout(Duration::from_millis(1500))
            .is_err()
    );
    assert_eq!(holder(&server), leader.identity);
    let renewals = server
        .requests()
        .iter()
        .filter(|r| {
            r.method == "PUT"
                && r.header("authorization") == Some(&format!("Bearer {}", leader.token))
        })
        .count();
    assert!(
        renewals >= 3,
        "the leader renews every retry period ({renewals} PUTs)"
    );

    // Cut the leader off: it reports the loss by its renew deadline, and the follower
    // takes over once the lease has not changed for a lease duration.
    let cut = Instant::now();
    server.block_token(&leader.token);
    assert_eq!(
        leader.leadership.recv_timeout(Duration::from_secs(3)),
        Ok(false)
    );
    assert!(
        cut.elapsed() < Duration::from_millis(2500),
        "loss reported after {:?}",
        cut.elapsed()
    );
    assert_eq!(
        follower.leadership.recv_timeout(Duration::from_secs(6)),
        Ok(true)
    );
    assert!(
        cut.elapsed() >= Duration::from_millis(1500),
        "took over after {:?}",
        cut.elapsed()
    );
    assert_eq!(holder(&server), follower.identity);
    let lease = server.lease("kube-system", "route-controller").unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2);

    for c in [leader, follower] {
        c.stop.stop();
        c.thread.join().unwrap();
    }
}

#[test]
fn releasing_the_lease_on_stop_lets_the_successor_take_over_at_once() {
    let server = FakeApiServer::start();
    let a = candidate(
        &server,
        "a",
        Duration::from_secs(15),
        Duration::from_secs(10),
    );
    assert_eq!(a.leadership.recv_timeout(Duration::from_secs(10)), Ok(true));
    let b = candidate(
        &server,
        "b",
        Duration::from_secs(15),
        Duration::from_secs(10),
    );
    let b_token = format!("Bearer {}", b.token);
    assert!(
        server.wait_for(Duration::from_secs(5), |r| r.iter().any(|r| r.method
            == "GET"
            && r.header("authorization") == Some(&b_token)))
    );
    assert!(
        b.leadership
            .recv_timeout(Duration::from_millis(500))
            .is_err()
    );

    let stopped = Instant::now();
    a.stop.stop();
    a.thread.join().unwrap();
    assert!(stopped.elapsed() < Duration::from_secs(2));
    let release = server
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.method == "PUT" && r.header("authorization") == Some("Bearer token-a"))
        .unwrap()
        .json();
    assert_eq!(release["spec"]["leaseDurationSeconds"], 1);
    assert!(
        release["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or("")
            .is_empty()
    );
    assert_eq!(
        a.leadership.try_recv(),
        Err(crossbeam_channel::TryRecvError::Disconnected)
    );

    // Far sooner than the 15 s lease duration.
    assert_eq!(b.leadership.recv_timeout(Duration::from_secs(3)), Ok(true));
    assert_eq!(holder(&server), b.identity);
    b.stop.stop();
    b.thread.join().unwrap();
}
