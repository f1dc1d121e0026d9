//! The binary's shutdown and exit rules, observed from outside: `route-controller run`
//! as a process against the fake API server, with the in-memory cloud slowed down by
//! `ROUTE_CONTROLLER_FAKE_LATENCY` so that a call is in flight when it matters.
//!
//! - SIGTERM: no new passes, in-flight calls finish (within 10 s), exit status 0;
//! - a second signal exits at once;
//! - losing the lease exits with status 1, and so does an API server outage longer
//!   than the renew deadline.
//!
//! These rules are timed on the wall clock, since the process is real; every bound is
//! wide enough for a loaded two-core machine, and the measured value is printed
//! (`cargo test --test exit_status -- --nocapture`).

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::time::{Duration, Instant};

use controller_process::{ControllerProcess, Spawn};
use fake_apiserver::{FakeApiServer, node_json};

/// The actor's drain deadline after SIGTERM (`actor::DRAIN_TIMEOUT`).
const DRAIN: Duration = Duration::from_secs(10);

/// A fake API server with one node, and a controller with the in-memory cloud whose
/// calls each take `latency`, in poll mode (its first pass lists, then creates).
fn start(label: &str, latency: &str, extra: &[&str]) -> (FakeApiServer, ControllerProcess) {
    let server = FakeApiServer::start();
    server.put_node(node_json("n1", 5, &["10.244.1.0/24"], "10.0.0.1"));
    let journal = std::env::temp_dir().join(format!(
        "route-controller-{label}-{}.journal",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&journal);
    let process = Spawn::new()
        .args([
            "--cloud-provider=fake",
            "--cluster-cidr=10.244.0.0/16",
            &format!("--master={}", server.url()),
        ])
        .args(extra.iter().copied())
        .env("ROUTE_CONTROLLER_FAKE_LATENCY", latency)
        .env(
            "ROUTE_CONTROLLER_FAKE_JOURNAL",
            journal.display().to_string(),
        )
        .env("RUST_LOG", "info,route_controller::workers=debug")
        .spawn(label);
    (server, process)
}

fn journal(label: &str) -> String {
    let path = std::env::temp_dir().join(format!(
        "route-controller-{label}-{}.journal",
        std::process::id()
    ));
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Sends SIGTERM and waits up to `within` for the exit, which must be 0; prints and
/// returns how long it took. `what` names what was in flight.
fn sigterm_exits_0(c: &mut ControllerProcess, within: Duration, what: &str) -> Duration {
    let signalled = Instant::now();
    c.send_signal("TERM");
    let Some(status) = c.wait_exit(within) else {
        c.fail(&format!(
            "still running {within:?} after SIGTERM with {what} in flight"
        ));
    };
    let took = signalled.elapsed();
    println!("SIGTERM with {what} in flight: exited {status} after {took:?}");
    if status.code() != Some(0) {
        c.fail(&format!("exit status {status} after SIGTERM, expected 0"));
    }
    took
}

/// Guards: the drain after SIGTERM (the actor waits for in-flight operations before it
/// returns). Broken by returning at once on shutdown: the create in flight is then cut
/// off and never journaled.
#[test]
fn sigterm_lets_the_call_in_flight_finish_and_exits_0() {
    let label = "sigterm_drains";
    let (_server, mut c) = start(label, "2s", &["--leader-elect=false"]);
    c.wait_for_log("cloud create (pass", Duration::from_secs(20));
    let took = sigterm_exits_0(&mut c, DRAIN + Duration::from_secs(10), "a 2 s create");
    assert!(
        journal(label).contains("10.244.1.0/24"),
        "the create in flight was cut off: journal {:?}\n{}",
        journal(label),
        c.log_tail()
    );
    assert!(c.log().contains("stopped cleanly"), "{}", c.log_tail());
    assert!(took <= DRAIN + Duration::from_secs(5), "took {took:?}");
}

/// Guards: the drain deadline (`DRAIN_TIMEOUT`): a create that would take 15 s does not
/// hold the process; it exits 0 once 10 s have passed, the create cut off. Broken by
/// waiting for every call (the exit then takes 15 s) or by not waiting at all (under
/// 10 s).
#[test]
fn a_call_outlasting_the_10_s_drain_is_given_up_and_the_exit_is_0() {
    let label = "sigterm_drain_deadline";
    let (_server, mut c) = start(label, "15s", &["--leader-elect=false"]);
    // Every call takes 15 s: the list, then the create.
    c.wait_for_log("cloud create (pass", Duration::from_secs(40));
    let took = sigterm_exits_0(&mut c, DRAIN + Duration::from_secs(20), "a 15 s create");
    assert!(
        took >= DRAIN - Duration::from_millis(500),
        "did not wait for the call in flight: exited after {took:?}"
    );
    assert!(
        took <= DRAIN + Duration::from_secs(4),
        "the 10 s drain deadline was not kept: {took:?}"
    );
    assert!(
        !journal(label).contains("10.244.1.0/24"),
        "the create finished before the exit: the drain waited past its deadline"
    );
}

/// Guards: a list in flight does not hold a shutdown (only writes are waited for): a
/// 60 s list is left to its worker and the process exits 0 at once. Broken by counting
/// lists as in flight in `Controller::is_idle` (the exit then waits the 10 s drain).
#[test]
fn a_list_in_flight_does_not_hold_the_exit() {
    let (_server, mut c) = start("sigterm_list", "60s", &["--leader-elect=false"]);
    c.wait_for_log("cloud list (pass", Duration::from_secs(20));
    let took = sigterm_exits_0(&mut c, DRAIN + Duration::from_secs(20), "a 60 s list");
    assert!(
        took < DRAIN - Duration::from_secs(5),
        "the list held the exit for {took:?}"
    );
}

/// Guards: the signal thread's "second signal exits at once" (src/main.rs). Broken by
/// treating every signal as the first: the exit then waits for the 10 s drain.
#[test]
fn a_second_signal_exits_at_once() {
    // A create in flight holds the drain (a list would not: it is not waited for).
    let (_server, mut c) = start("second_signal", "15s", &["--leader-elect=false"]);
    c.wait_for_log("cloud create (pass", Duration::from_secs(40));
    c.send_signal("TERM");
    c.wait_for_log("send it again to exit at once", Duration::from_secs(5));
    let second = Instant::now();
    c.send_signal("INT");
    let Some(status) = c.wait_exit(Duration::from_secs(8)) else {
        c.fail("still running 8 s after the second signal");
    };
    let took = second.elapsed();
    println!("second signal: exited {status} after {took:?}");
    if status.code() != Some(130) {
        c.fail(&format!("exit status {status}, expected 130"));
    }
    assert!(took < Duration::from_secs(3), "{took:?}");
}

const ELECTION: [&str; 4] = [
    "--leader-elect=true",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
];

fn wait_leading(server: &FakeApiServer, c: &mut ControllerProcess) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(lease) = server.lease("kube-system", "route-controller")
            && lease["spec"]["holderIdentity"]
                .as_str()
                .is_some_and(|h| !h.is_empty())
        {
            return lease;
        }
        if Instant::now() > deadline {
            c.fail("the controller did not take the lease within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Guards: exit status 1 when another replica holds the lease (src/main.rs maps the
/// actor's `LostLeadership` to 1). Broken by mapping it to 0 or by ignoring the loss:
/// the process then keeps running or exits 0.
#[test]
fn losing_the_lease_to_another_holder_exits_1() {
    let (server, mut c) = start("lease_lost", "0s", &ELECTION);
    let mut lease = wait_leading(&server, &mut c);
    c.wait_for_log("pass 1", Duration::from_secs(20));
    // Another replica takes the lease (as after a split brain or a manual edit): a PUT
    // with the resourceVersion the holder last wrote.
    lease["spec"]["holderIdentity"] = "thief".into();
    lease["spec"]["leaseDurationSeconds"] = 60.into();
    let url = format!(
        "{}/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/route-controller",
        server.url()
    );
    let taken = Instant::now();
    let mut stolen = false;
    for _ in 0..50 {
        let mut current = server.lease("kube-system", "route-controller").unwrap();
        current["spec"] = lease["spec"].clone();
        match ureq::put(&url)
            .header("Content-Type", "application/json")
            .send(current.to_string())
        {
            Ok(_) => {
                stolen = true;
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)), // a renewal raced us
        }
    }
    assert!(stolen, "could not take the lease from the test");
    let Some(status) = c.wait_exit(Duration::from_secs(10)) else {
        c.fail("still running 10 s after the lease was taken");
    };
    let took = taken.elapsed();
    println!("lease taken by another holder: exited {status} after {took:?}");
    if status.code() != Some(1) {
        c.fail(&format!("exit status {status}, expected 1"));
    }
    assert!(
        c.log().contains("leader lease was lost"),
        "{}",
        c.log_tail()
    );
}

/// Guards: the renew deadline (client-go's): with the API server unreachable for
/// longer than the renew deadline (3 s here; `run` refuses
/// sub-second periods, so the retry period is 1 s), the leader gives up and exits 1. Broken
/// by not checking the deadline (the process then runs on as a leader that cannot
/// renew) or by exiting 0.
#[test]
fn an_api_server_outage_longer_than_the_renew_deadline_exits_1() {
    let (server, mut c) = start("api_outage", "0s", &ELECTION);
    wait_leading(&server, &mut c);
    c.wait_for_log("pass 1", Duration::from_secs(20));
    let cut = Instant::now();
    // The controller sends no bearer token: block the empty one.
    server.block_token("");
    let Some(status) = c.wait_exit(Duration::from_secs(15)) else {
        c.fail("still running 15 s into an outage, with a 3 s renew deadline");
    };
    let took = cut.elapsed();
    println!("API server outage, renew deadline 3 s: exited {status} after {took:?}");
    if status.code() != Some(1) {
        c.fail(&format!("exit status {status}, expected 1"));
    }
    assert!(
        took >= Duration::from_millis(2500),
        "exited before the renew deadline: {took:?}"
    );
}
