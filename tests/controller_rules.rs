//! The controller's rules that mutation testing (`.ci/mutants`, tests/README.md "Mutation
//! testing") found unpinned, each test killing the mutants its comment names, in
//! virtual time against the in-memory cloud.

#[path = "support/driver.rs"]
mod driver;

use std::sync::Arc;
use std::time::Duration;

use driver::*;
use route_controller::NodeEvent;
use route_controller::cloud::CloudErrorKind;
use route_controller::cloud::fake::{Call, FakeCloud};

/// Kills, in src/controller/budget.rs, `Spending::blocked` made `None` and its
/// `b > now` made `b < now`, and in src/controller/timers.rs the guard `pause > due`
/// made `false` or `==`: a rate-limit pause holds back the start of a pass, not only
/// its calls. A node added during a 30 s pause gets its pass at the instant the pause
/// ends, not before (with `None` or `<`, the pass starts 50 ms after the node is added,
/// its list then waiting for the same refusal, so only the pass count shows it; with
/// `<` no pass starts after the pause either).
#[test]
fn a_pass_triggered_during_a_rate_limit_pause_starts_when_the_pause_ends() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.start(vec![]);
    d.cloud.fail_next(
        Call::Create,
        [CloudErrorKind::RateLimited { after: secs(30.0) }],
    );
    d.node_event(NodeEvent::Added(node(
        "n0",
        &["10.0.0.0/24"],
        "192.168.0.0",
    )));
    d.advance(secs(1.0)); // n0's pass: its create is refused, 30 s pause
    let refused_at = d.sent.last().expect("n0's create").0;
    let passes = d.passes();
    assert_eq!(passes, 2, "the first list's pass and n0's");
    d.advance(secs(5.0));
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    let pause_end = d.t0 + refused_at + secs(30.0);
    // The pass is due now, but the controller sleeps to the end of the pause (with
    // the pause-end guard of `timers` made false or `==`, it would be woken for the
    // pass at once and again at every tick, never starting it: a busy loop).
    assert_eq!(d.ctrl.next_deadline(), Some(pause_end));
    d.advance(pause_end - d.now - secs(0.001));
    assert_eq!(
        d.passes(),
        passes,
        "a pass started during the pause (at {:?})",
        d.elapsed()
    );
    assert!(
        d.sent.last().unwrap().0 == refused_at,
        "calls during the pause"
    );
    d.advance(secs(0.001));
    assert_eq!(d.passes(), passes + 1, "one pass at the end of the pause");
    d.advance(secs(5.0));
    assert_eq!(
        d.cloud_routes(),
        [
            ("n0".to_string(), "10.0.0.0/24".to_string()),
            ("n1".to_string(), "10.0.1.0/24".to_string())
        ]
    );
}

/// Kills, in src/controller/view.rs, the `==` of `RouteView::remove`'s search of the
/// node's destination list made `!=`: deleting one of a node's two routes then takes
/// the kept destination out of `routes_to` instead, which only the node's
/// `NetworkUnavailable` reads. n0 loses one of its two pod CIDRs; after that route's
/// delete, n0 (still routed by its other route) must keep `False`/`RouteCreated`.
#[test]
fn deleting_one_of_a_nodes_two_routes_leaves_the_node_routable() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("kept", "n0", "10.0.1.0/24"),
        route("gone", "n0", "10.0.2.0/24"),
    ]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    let n0 = node("n0", &["10.0.1.0/24", "10.0.2.0/24"], "192.168.0.1");
    d.start(vec![n0.clone()]);
    d.advance(secs(10.0));
    assert_eq!(d.conditions["n0"].reason.as_ref(), "RouteCreated");
    let mut narrowed = bumped(n0, 2);
    narrowed.pod_cidrs = vec!["10.0.1.0/24".to_string()];
    d.node_event(NodeEvent::Modified(narrowed.clone()));
    d.advance(secs(10.0));
    assert_eq!(
        d.cloud_routes(),
        [("n0".to_string(), "10.0.1.0/24".to_string())]
    );
    // A new address (nothing to change in the cloud) and no condition shown: the pass
    // writes n0's condition from the view as it stands after the delete.
    let before = d.condition_writes.len();
    let mut moved = bumped(narrowed, 3);
    moved.addresses = vec![route_controller::model::NodeAddress::internal_ip(
        "192.168.0.9",
    )];
    d.node_event(NodeEvent::Modified(moved));
    d.advance(secs(10.0));
    let writes: Vec<_> = d.condition_writes[before..]
        .iter()
        .map(|(n, c)| format!("{n} {} {}", c.status, c.reason))
        .collect();
    assert_eq!(writes, ["n0 False RouteCreated"]);
}

/// Kills, in src/controller/timers.rs, `budget_refill`'s guard for a pass waiting to
/// list (`p.list.is_none() && self.ops.in_flight() == 0`) made `false`, or its `==`
/// made `!=`: a list that waits only for the budget must wake the controller when the
/// bucket has refilled, or it waits for whatever wakes it next (here nothing before
/// the resync). With one request per 5 s: the first list at 0 s, n0's create at 5 s,
/// ambiguous, so the view is stale and the retry's pass must list again; that list
/// goes out at 10 s exactly, when the token is back (with either mutant, at 60 s, the
/// end of the test).
#[test]
fn a_list_waiting_for_budget_goes_out_the_instant_the_budget_allows() {
    let mut config = watch_config();
    config.budget = Some(route_controller::Budget::new(0.2, 1));
    let mut d = Driver::new(config);
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Ambiguous]);
    d.start(vec![node("n0", &["10.0.0.0/24"], "192.168.0.0")]);
    d.advance(secs(60.0));
    let sent: Vec<(f64, &str)> = d
        .sent
        .iter()
        .map(|(t, op)| (t.as_secs_f64(), op_kind(op)))
        .collect();
    // The relist finds the route the ambiguous create made: nothing more to send.
    assert_eq!(sent, [(0.0, "list"), (5.0, "create"), (10.0, "list")]);
    assert_eq!(d.cloud_routes().len(), 1);
}

/// Kills `Cause::mentions` made `true` (src/controller/cause.rs): asked whether a pass
/// was for a node, the cause says no for a node it did not sample (tests/controller.rs
/// asks only the positive question).
#[test]
fn a_cause_mentions_only_the_nodes_it_sampled() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    d.node_event(NodeEvent::Added(node(
        "n0",
        &["10.0.0.0/24"],
        "192.168.0.0",
    )));
    d.advance(secs(1.0));
    let cause = &d.reports.last().expect("n0's pass").cause;
    assert!(cause.mentions("n0"), "{cause}");
    assert!(!cause.mentions("n1"), "{cause}");
}

/// Kills, in src/controller/mod.rs, `Controller::pass_running` made `false`. A node
/// change that arrives while a pass waits for its list belongs to that pass's
/// follow-up: it counts as coalesced, and it does not take the leading edge meant for
/// an idle controller (a follow-up started the instant the list is answered), but
/// waits out the 50 ms debounce from its arrival. With the mutant the change is not
/// counted and the follow-up starts with the list's answer.
#[test]
fn a_node_change_while_a_pass_lists_is_coalesced_and_waits_the_debounce() {
    let mut d = Driver::new(watch_config());
    d.start(vec![node("n0", &["10.0.0.0/24"], "192.168.0.0")]);
    // Past the view's max age, the next change lists first.
    d.advance(Duration::from_secs(301));
    let before = d.passes();
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    assert_eq!(d.passes() - before, 1, "the change starts a pass");
    assert_eq!(d.pending.len(), 1, "and it lists: {:?}", d.pending);
    let coalesced = d.metrics.triggers_coalesced.get();
    // A quiet second later, with the list still in flight, another node.
    d.now += secs(1.0);
    d.node_event(NodeEvent::Added(node(
        "n2",
        &["10.0.2.0/24"],
        "192.168.0.2",
    )));
    assert_eq!(
        d.metrics.triggers_coalesced.get(),
        coalesced + 1,
        "a change during planning is coalesced"
    );
    // The list is answered 10 ms later: the first pass plans, the follow-up waits.
    d.now += secs(0.01);
    assert!(d.answer_one(), "the list");
    assert_eq!(
        d.passes() - before,
        1,
        "no follow-up before the debounce: {:#?}",
        d.reports
    );
    d.advance(secs(0.039));
    assert_eq!(d.passes() - before, 1, "still within the debounce");
    d.advance(secs(0.002));
    assert_eq!(d.passes() - before, 2, "the follow-up at 50 ms");
    d.advance(secs(1.0));
    assert_eq!(d.cloud_routes().len(), 3);
}

/// Kills, in src/controller/mod.rs, `==` made `!=` in `maybe_finish`'s guard (a pass
/// still planning does not report yet). A pass whose last create ends while another
/// pass waits to list (here the periodic resync, whose list waits for the create in
/// flight) reports the moment its create ends; with the mutant its report waits for
/// another pass's planning to be its own, and never comes.
#[test]
fn a_pass_whose_create_ends_while_another_waits_to_list_reports_at_once() {
    let mut d = Driver::new(watch_config());
    d.start(vec![node("n0", &["10.0.0.0/24"], "192.168.0.0")]);
    let reports = d.reports.len();
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    assert_eq!(d.pending.len(), 1, "n1's create: {:?}", d.pending);
    // Past the 12–24 h resync, with the create still in flight.
    d.now += Duration::from_secs(25 * 3600);
    d.feed(route_controller::Input::Tick);
    assert_eq!(
        d.pending.len(),
        1,
        "the resync's list waits: {:?}",
        d.pending
    );
    assert_eq!(d.reports.len(), reports, "no pass has ended yet");
    assert!(d.answer_one(), "n1's create");
    assert_eq!(
        d.reports.len(),
        reports + 1,
        "the create's pass reports when its create ends"
    );
    assert_eq!(d.reports[reports].created, 1);
    assert_eq!(
        d.pending
            .iter()
            .map(|(_, op)| op_kind(op))
            .collect::<Vec<_>>(),
        vec!["list"],
        "then the resync lists"
    );
    d.settle();
    assert_eq!(d.reports.len(), reports + 2, "and reports too");
    assert!(d.reports[reports + 1].listed);
}
