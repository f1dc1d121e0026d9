//! Fencing in the controller, in virtual time (DESIGN.md invariant 9): what the
//! controller does when the fence stops an operation, and the dual protection of a
//! new leader, which lists again once the previous leader's last possible request has
//! timed out. The fence itself is pinned by `fence`'s unit tests, the lease thread's
//! side by `tests/kube_lease.rs`, the actor's by `tests/actor.rs`, the providers' by
//! `tests/hcloud.rs` and `tests/aws.rs`, and the whole by `tests/e2e_fencing.rs`.

#[path = "support/driver.rs"]
mod driver;

use std::time::Duration;

use driver::*;
use route_controller::cloud::CloudErrorKind;
use route_controller::cloud::fake::Call;
use route_controller::{CloudOp, Command, Exit, Input, Trigger};

/// Renew deadline 10 s plus a request timeout of 20 s.
const HANDOVER: Duration = Duration::from_secs(30);

fn leader_config() -> route_controller::Config {
    let mut config = watch_config();
    config.leader_election = true;
    config.handover_relist = Some(HANDOVER);
    config
}

fn lists(d: &Driver) -> Vec<Duration> {
    d.sent
        .iter()
        .filter(|(_, op)| matches!(op, CloudOp::List { .. }))
        .map(|(at, _)| *at)
        .collect()
}

/// Guards the dual protection: a write of the old leader that lands after the new
/// leader's first list (its request was on the wire when its fence closed) is seen by
/// the list the handover timer starts, exactly `handover_relist` after the lease was
/// gained, and repaired then; not 12–24 h later at the resync. Without the timer
/// (never arm `handover_at` in `on_leadership`) the stale route stays and no second
/// list goes out.
#[test]
fn a_new_leader_lists_again_when_the_old_leaders_last_request_has_timed_out_and_repairs_it() {
    let mut d = Driver::new(leader_config());
    d.start(vec![node("n0", &["10.0.0.0/24"], "192.168.0.1")]);
    let gained = d.elapsed();
    d.feed(Input::Leadership(true));
    d.settle();
    assert_eq!(lists(&d), vec![gained], "the new term lists at once");
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.0.0/24".into())]);

    // The old leader's create for a node that is gone lands 5 s into the new term.
    d.advance(secs(5.0));
    d.cloud.seed([route("", "gone", "10.0.9.0/24")]);
    assert_eq!(
        d.ctrl.next_deadline().map(|t| t - (d.now - d.elapsed())),
        Some(gained + HANDOVER),
        "woken exactly when the old leader's last request has timed out"
    );
    d.advance(HANDOVER - secs(5.0) - secs(0.001));
    assert_eq!(lists(&d).len(), 1, "no list before the handover timer");
    assert_eq!(d.count("delete"), 0);
    d.advance(secs(0.001));
    assert_eq!(lists(&d), vec![gained, gained + HANDOVER]);
    assert_eq!(
        d.cloud_routes(),
        vec![("n0".into(), "10.0.0.0/24".into())],
        "the late write is repaired"
    );
    let report = d.reports.last().expect("the handover pass reports");
    assert_eq!(report.cause.samples, vec![Trigger::Handover], "{report}");
    assert_eq!(report.deleted, 1, "{report}");
    // One list per term: nothing more until the resync.
    d.advance(Duration::from_secs(3600));
    assert_eq!(lists(&d).len(), 2);
}

/// Guards that the timer belongs to the term: a lease lost before it fires takes the
/// timer with it (the replica exits), and a controller without leader election (no
/// `handover_relist`) never lists for it.
#[test]
fn the_handover_list_is_the_terms_and_absent_without_leader_election() {
    let mut d = Driver::new(leader_config());
    d.start(vec![node("n0", &["10.0.0.0/24"], "192.168.0.1")]);
    d.feed(Input::Leadership(true));
    d.settle();
    d.advance(secs(10.0));
    d.feed(Input::Leadership(false));
    assert_eq!(d.exits, vec![Exit::LostLeadership]);
    assert_eq!(d.ctrl.next_deadline(), None);
    d.advance(HANDOVER * 2);
    assert_eq!(lists(&d).len(), 1);

    let mut d = Driver::new(watch_config());
    d.start(vec![node("n0", &["10.0.0.0/24"], "192.168.0.1")]);
    d.advance(HANDOVER * 2);
    assert_eq!(lists(&d).len(), 1, "no election, no handover list");
}

/// Guards the reaction to a fenced reply (the provider stopped an operation between
/// its requests, or a worker never started it): it is not retried, the view of the
/// routes is no longer trusted, and the replica stops writing and exits as on a lost
/// lease, before the lease thread says so. Without the `fenced` check in
/// `on_cloud_reply` the other queued creates go out and the failed one is retried a
/// second later.
#[test]
fn a_fenced_operation_is_never_retried_and_ends_the_term_at_once() {
    let mut config = leader_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(vec![
        node("n0", &["10.0.0.0/24"], "192.168.0.1"),
        node("n1", &["10.0.1.0/24"], "192.168.0.2"),
    ]);
    d.feed(Input::Leadership(true));
    d.answer_one(); // the list; n0's create goes out, n1's waits
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Fenced]);
    d.answer_one();
    assert_eq!(d.exits, vec![Exit::LostLeadership]);
    assert!(!d.ctrl.is_leading());
    let sent = d.sent.len();
    d.advance(Duration::from_secs(600));
    assert_eq!(
        d.sent.len(),
        sent,
        "sent after a fenced reply: {:?}",
        d.sent
    );
    assert!(d.cloud.routes().is_empty());
    let failed: Vec<_> = d
        .commands
        .iter()
        .filter(|c| matches!(c, Command::PassFinished(r) if r.failed == 1))
        .collect();
    assert_eq!(failed.len(), 1, "the pass reports the fenced create failed");
}

/// Guards SIGTERM's exit status through fencing: a fence that closes during the
/// drain, as a fenced reply shows it before the lease thread does, ends the drain at
/// once and cleanly, not at the drain deadline and not as a lost lease.
#[test]
fn a_fenced_reply_during_the_drain_ends_it_cleanly_at_once() {
    let mut config = leader_config();
    config.max_in_flight = 2;
    let mut d = Driver::new(config);
    d.start(vec![
        node("n0", &["10.0.0.0/24"], "192.168.0.1"),
        node("n1", &["10.0.1.0/24"], "192.168.0.2"),
    ]);
    d.feed(Input::Leadership(true));
    d.answer_one(); // the list; two creates in flight
    d.feed(Input::Shutdown);
    assert!(d.exits.is_empty(), "{:?}", d.exits);
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Fenced]);
    d.answer_one();
    assert_eq!(
        d.exits,
        vec![Exit::Shutdown],
        "with a create still in flight"
    );
    assert_eq!(d.ctrl.next_deadline(), None);
}
