//! Two electors on one Lease of the fake API server: exactly one leads, the other
//! takes over when the holder stops renewing, and a release on stop hands over at
//! once. The timing rules run in virtual time over real HTTP (the test drives
//! `try_acquire_or_renew` with its own clock); the release test runs the thread.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use fake_apiserver::FakeApiServer;
use route_controller::kube::config::{Auth, Secret, TlsSettings};
use std::time::SystemTime;

use route_controller::Fence;
use route_controller::kube::lease::{
    Elector, LeaseConfig, spawn_leader_election, try_acquire_or_renew,
};
use route_controller::kube::{Client, ClientOptions, KubeConfig, StopHandle};

struct Candidate {
    identity: String,
    token: String,
    leadership: Receiver<bool>,
    fence: Fence,
    stop: StopHandle,
    thread: std::thread::JoinHandle<()>,
}

fn client(server: &FakeApiServer, token: &str) -> Client {
    let config = KubeConfig {
        server: server.url(),
        source: "test".into(),
        tls: TlsSettings::default(),
        auth: Auth::Token(Secret::new(token.to_string())),
        proxy_url: None,
        namespace: "default".into(),
    };
    Client::new(&config, ClientOptions::default()).unwrap()
}

fn candidate(server: &FakeApiServer, name: &str, lease: Duration, renew: Duration) -> Candidate {
    let client = client(server, &format!("token-{name}"));
    let mut lease_config = LeaseConfig::new(format!("host-{name}_{name}"));
    lease_config.lease_duration = lease;
    lease_config.renew_deadline = renew;
    lease_config.retry_period = Duration::from_millis(200);
    let (tx, rx) = crossbeam_channel::unbounded();
    let stop = StopHandle::new();
    let fence = Fence::new();
    let thread = spawn_leader_election(
        client,
        lease_config.clone(),
        tx,
        fence.clone(),
        stop.clone(),
    )
    .unwrap();
    Candidate {
        identity: lease_config.identity,
        token: format!("token-{name}"),
        leadership: rx,
        fence,
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

/// One elector on its own client, driven by the test in virtual time: its requests are
/// real HTTP to the fake API server, its clock is the test's.
struct Virtual {
    name: &'static str,
    token: String,
    client: Client,
    elector: Elector,
    next: Instant,
}

fn virtual_candidate(server: &FakeApiServer, name: &'static str, t0: Instant) -> Virtual {
    let token = format!("token-{name}");
    let mut config = LeaseConfig::new(format!("host-{name}_{name}"));
    config.lease_duration = LEASE;
    config.renew_deadline = RENEW;
    config.retry_period = RETRY;
    Virtual {
        name,
        client: client(server, &token),
        token,
        elector: Elector::new(config),
        next: t0,
    }
}

const LEASE: Duration = Duration::from_secs(2);
const RENEW: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_millis(200);
/// Candidates' jitter draw, fixed: their interval is 200 ms × (1 + 1.2 × ½) = 320 ms.
const JITTER: f64 = 0.5;
const CANDIDATE_INTERVAL: Duration = Duration::from_millis(320);

/// What happened in a virtual run: every attempt, and every change of leadership.
#[derive(Default)]
struct Log {
    /// (virtual time since t0, candidate, leads after the attempt, wrote successfully)
    attempts: Vec<(Duration, &'static str, bool, bool)>,
    changes: Vec<(Duration, &'static str, bool)>,
}

/// Runs the candidates' attempts in time order until `until` (virtual).
fn run_until(
    server: &FakeApiServer,
    cs: &mut [Virtual],
    t0: Instant,
    until: Duration,
    log: &mut Log,
) {
    loop {
        let Some(c) = cs.iter_mut().min_by_key(|c| c.next) else {
            return;
        };
        if c.next > t0 + until {
            return;
        }
        let now = c.next;
        // An elector that asks for its next attempt in the past would spin here.
        assert!(
            log.attempts.len() < 10_000,
            "no progress at {:?}: {:?}",
            now - t0,
            &log.attempts[log.attempts.len() - 5..]
        );
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + (now - t0);
        let before = lease_version(server);
        try_acquire_or_renew(&c.client, &mut c.elector, &|| (now, wall));
        let wrote = lease_version(server) != before;
        log.attempts
            .push((now - t0, c.name, c.elector.is_leader(), wrote));
        if let Some(leading) = c.elector.leadership_change(now) {
            log.changes.push((now - t0, c.name, leading));
        }
        c.next = c.elector.next_attempt(now, JITTER);
    }
}

/// The lease's resourceVersion in the server: it changes with every write it takes.
fn lease_version(server: &FakeApiServer) -> String {
    server
        .lease("kube-system", "route-controller")
        .map(|l| l["metadata"]["resourceVersion"].to_string())
        .unwrap_or_default()
}

/// The timing rules of the elector in virtual time over real HTTP: exactly one of two
/// leads and renews every retry period; cut off from the API server, the leader reports
/// the loss exactly at its renew deadline; the follower takes over no sooner than a
/// lease duration after the last renewal it saw, and at most one attempt interval later.
/// Kills: the renew deadline check (`check_deadline`), the expiry check of `on_get`
/// (`valid_until > now`), and the leader's renewal period.
#[test]
fn exactly_one_of_two_electors_leads_and_the_other_takes_over_when_it_stops_renewing() {
    let server = FakeApiServer::start();
    let t0 = Instant::now();
    let mut cs = [
        virtual_candidate(&server, "a", t0),
        virtual_candidate(&server, "b", t0 + Duration::from_millis(10)),
    ];
    let mut log = Log::default();
    run_until(&server, &mut cs, t0, Duration::from_secs(3), &mut log);
    assert_eq!(
        log.changes,
        vec![(Duration::ZERO, "a", true)],
        "a, first to ask, leads; b never does"
    );
    assert_eq!(holder(&server), cs[0].elector.config().identity);
    let renewals: Vec<Duration> = log
        .attempts
        .iter()
        .filter(|(_, who, _, wrote)| *who == "a" && *wrote)
        .map(|(t, ..)| *t)
        .collect();
    assert_eq!(
        renewals.len(),
        16,
        "a wrote at 0, 0.2, …, 3.0 s: {renewals:?}"
    );
    assert!(
        renewals.windows(2).all(|w| w[1] - w[0] == RETRY),
        "{renewals:?}"
    );

    // Cut a off. Its last renewal is the one at 3.0 s.
    let last_renewal = *renewals.last().unwrap();
    server.block_token(&cs[0].token);
    log.changes.clear();
    run_until(&server, &mut cs, t0, Duration::from_secs(8), &mut log);
    let (lost_at, who, leading) = log.changes[0];
    assert_eq!((who, leading), ("a", false), "{:?}", log.changes);
    assert_eq!(
        lost_at,
        last_renewal + RENEW,
        "the loss is reported exactly at the renew deadline"
    );
    let (took_at, who, leading) = log.changes[1];
    assert_eq!((who, leading), ("b", true), "{:?}", log.changes);
    let after = took_at - last_renewal;
    println!("b took over {after:?} after a's last renewal (lease {LEASE:?})");
    assert!(
        after >= LEASE && after <= LEASE + CANDIDATE_INTERVAL + Duration::from_millis(10),
        "b took over {after:?} after a's last renewal"
    );
    assert_eq!(log.changes.len(), 2, "{:?}", log.changes);
    assert_eq!(holder(&server), cs[1].elector.config().identity);
    let lease = server.lease("kube-system", "route-controller").unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 2);
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
    // The fence opens before the gain is reported, until the renew deadline.
    assert_eq!(a.fence.check(), Ok(()));
    let deadline = a.fence.deadline().expect("open until the renew deadline");
    assert!(deadline <= Instant::now() + Duration::from_secs(10));
    let b = candidate(
        &server,
        "b",
        Duration::from_secs(15),
        Duration::from_secs(10),
    );
    let b_token = format!("Bearer {}", b.token);
    // b's second read of the lease: its first attempt has decided (a wrongful gain
    // would be reported before b tries again), whatever the machine's load, where a
    // fixed wait for no message could end before the decision.
    assert!(server.wait_for(Duration::from_secs(10), |r| {
        r.iter()
            .filter(|r| r.method == "GET" && r.header("authorization") == Some(&b_token))
            .count()
            >= 2
    }));
    assert!(b.leadership.try_recv().is_err(), "b took a lease a holds");

    assert!(b.fence.check().is_err(), "a standby's fence is closed");
    let stopped = Instant::now();
    a.stop.stop();
    a.thread.join().unwrap();
    // Wall clock (a real thread's stop): wide, ten attempt intervals, and printed.
    let took = stopped.elapsed();
    println!("the elector stopped {took:?} after it was told to");
    assert!(took < Duration::from_secs(2), "stop took {took:?}");
    // Closed before the release could let b take over, and for good.
    assert!(a.fence.check().is_err());
    assert_eq!(a.fence.deadline(), None);
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
    assert_eq!(b.fence.check(), Ok(()));
    b.stop.stop();
    b.thread.join().unwrap();
}
