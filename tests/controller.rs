//! Deterministic scenarios of the controller in virtual time: one test per invariant
//! of DESIGN.md and per "where we beat upstream" row that the controller covers.

#[path = "support/driver.rs"]
mod driver;

use std::time::Duration;

use driver::*;
use route_controller::cloud::CloudErrorKind;
use route_controller::cloud::fake::{Call, FakeCloud};
use route_controller::metrics::TriggerKind;
use route_controller::model::Cidr;
use route_controller::{CloudOp, CloudReply, Command, Input, Mode, NodeEvent, Trigger, Usage};
use std::sync::Arc;

fn nodes(n: usize) -> Vec<route_controller::model::Node> {
    (0..n)
        .map(|i| {
            node(
                &format!("n{i}"),
                &[&format!("10.0.{i}.0/24")],
                &format!("192.168.0.{i}"),
            )
        })
        .collect()
}

// --- invariant 1: no delete before the node view is complete -------------------------

#[test]
fn no_route_is_deleted_before_the_initial_list_is_complete() {
    let cloud = Arc::new(FakeCloud::new());
    // Routes for two nodes; the list will deliver them slowly.
    cloud.seed([
        route("a", "n0", "10.0.0.0/24"),
        route("b", "n1", "10.0.1.0/24"),
    ]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.node_event(NodeEvent::Init);
    d.node_event(NodeEvent::InitApply(node(
        "n0",
        &["10.0.0.0/24"],
        "192.168.0.0",
    )));
    d.advance(secs(60.0));
    assert_eq!(
        d.sent.len(),
        0,
        "nothing may be sent while the list is partial: {:?}",
        d.sent
    );
    d.node_event(NodeEvent::InitApply(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.node_event(NodeEvent::InitDone);
    d.settle();
    assert_eq!(d.count("delete"), 0);
    assert_eq!(d.cloud_routes().len(), 2);
}

#[test]
fn no_route_is_deleted_during_a_relist() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(3));
    assert_eq!(d.cloud_routes().len(), 3);
    // The watch broke; a relist starts and n2 is not in it yet.
    d.node_event(NodeEvent::Init);
    d.node_event(NodeEvent::InitApply(nodes(3)[0].clone()));
    d.advance(Duration::from_secs(3600 * 30));
    assert_eq!(
        d.count("delete"),
        0,
        "a partial relist must not delete n1/n2's routes"
    );
    for n in nodes(3).into_iter().skip(1) {
        d.node_event(NodeEvent::InitApply(n));
    }
    d.node_event(NodeEvent::InitDone);
    d.settle();
    assert_eq!(d.count("delete"), 0);
}

#[test]
fn relist_deletes_the_routes_of_nodes_that_vanished_meanwhile() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(3));
    d.list(nodes(2));
    d.settle();
    assert_eq!(
        d.cloud_routes(),
        vec![
            ("n0".into(), "10.0.0.0/24".into()),
            ("n1".into(), "10.0.1.0/24".into())
        ]
    );
    let last = d.reports.last().unwrap();
    assert!(last.cause.to_string().contains("node n2 deleted"), "{last}");
}

// --- invariant 2: nothing outside the cluster CIDRs is deleted ----------------------

#[test]
fn routes_outside_the_cluster_cidrs_are_never_deleted() {
    let cloud = Arc::new(FakeCloud::new());
    let mut blackhole = route("bh", "", "172.16.0.0/24");
    blackhole.blackhole = true;
    cloud.seed([
        route("vpn", "", "192.168.100.0/24"),
        route("foreign", "gone", "10.1.0.0/24"),
        blackhole,
    ]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(1));
    d.advance(Duration::from_secs(48 * 3600)); // several resyncs
    assert_eq!(d.count("delete"), 0);
    assert_eq!(d.cloud_routes().len(), 4);
}

// --- invariant 3: one operation per destination ------------------------------------

#[test]
fn at_most_one_operation_per_destination_and_delete_before_create() {
    // Swapped routes (upstream R05): each destination needs a delete, then a create.
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("a", "n1", "10.0.0.0/24"),
        route("b", "n0", "10.0.1.0/24"),
    ]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.list(nodes(2));
    d.answer_one(); // the list
    let in_flight: Vec<_> = d.pending.iter().map(|(_, op)| destination(op)).collect();
    assert_eq!(in_flight.len(), 2, "two deletes in flight: {in_flight:?}");
    assert!(
        d.pending
            .iter()
            .all(|(_, op)| matches!(op, CloudOp::Delete { .. }))
    );
    let mut dedup = in_flight.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(
        dedup.len(),
        in_flight.len(),
        "two operations for one destination: {in_flight:?}"
    );
    d.settle();
    assert_eq!(
        d.cloud_routes(),
        vec![
            ("n0".into(), "10.0.0.0/24".into()),
            ("n1".into(), "10.0.1.0/24".into())
        ]
    );
    // The fake would have refused a create while the old route existed.
    assert_eq!(
        d.metrics
            .cloud_requests(route_controller::metrics::CloudOperation::Create),
        2
    );
    assert!(d.events.is_empty(), "{:?}", d.events);
}

#[test]
fn duplicate_pod_cidr_on_one_node_is_one_create() {
    let mut d = Driver::new(watch_config());
    d.start(vec![node(
        "n4",
        &["10.0.1.0/24", "10.0.1.0/24"],
        "192.168.0.4",
    )]);
    assert_eq!(d.count("create"), 1);
    assert!(d.events.is_empty());
    assert_eq!(d.conditions["n4"].status, "False");
}

#[test]
fn cloud_operations_in_flight_are_bounded() {
    let mut config = watch_config();
    config.max_in_flight = 4;
    let mut d = Driver::new(config);
    d.list(nodes(20));
    d.answer_one(); // the list of an empty cloud
    let mut peak = 0;
    while !d.pending.is_empty() {
        peak = peak.max(d.pending.len());
        d.answer_one();
    }
    assert_eq!(peak, 4);
    assert_eq!(d.cloud_routes().len(), 20);
}

// --- invariant 4: coalescing --------------------------------------------------------

#[test]
fn a_burst_of_1000_triggers_gives_one_pass_and_at_most_one_follow_up() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    let before = d.passes();
    for n in nodes(250) {
        d.node_event(NodeEvent::Added(n.clone()));
        d.node_event(NodeEvent::Modified(bumped(
            route_controller::model::Node {
                addresses: vec![],
                ..n.clone()
            },
            2,
        )));
        d.node_event(NodeEvent::Modified(bumped(n.clone(), 3)));
        d.node_event(NodeEvent::Deleted(n));
    }
    d.advance(secs(10.0));
    let passes = d.passes() - before;
    assert!(
        (1..=2).contains(&passes),
        "1000 triggers gave {passes} passes"
    );
    // Every trigger but the one that opened each batch joined a batch.
    assert_eq!(d.metrics.triggers_coalesced.get(), 1000 - passes);
    assert!(d.cloud_routes().is_empty());
}

#[test]
fn triggers_during_a_pass_fold_into_exactly_one_follow_up() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    let before = d.passes();
    d.node_event(NodeEvent::Added(nodes(1)[0].clone()));
    assert_eq!(
        d.passes() - before,
        1,
        "the first trigger after quiet starts a pass at once"
    );
    // The create is in flight; more triggers arrive.
    for n in nodes(6).into_iter().skip(1) {
        d.node_event(NodeEvent::Added(n));
    }
    assert_eq!(d.passes() - before, 1, "triggers wait while a pass runs");
    d.advance(secs(1.0));
    assert_eq!(
        d.passes() - before,
        2,
        "one follow-up pass, started after the first ended"
    );
    d.advance(secs(5.0));
    assert_eq!(d.passes() - before, 2);
    assert_eq!(d.cloud_routes().len(), 6);
}

#[test]
fn a_constant_stream_of_triggers_cannot_postpone_a_pass_beyond_max_wait() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(1));
    let n = nodes(1)[0].clone();
    let before = d.passes();
    // Address changes every 20 ms for 5 s: shorter than the 50 ms debounce.
    for i in 0..250u64 {
        let mut changed = bumped(n.clone(), 10 + i);
        changed.addresses = vec![route_controller::model::NodeAddress::internal_ip(&format!(
            "192.168.1.{}",
            i % 200
        ))];
        d.node_event(NodeEvent::Modified(changed));
        d.advance(secs(0.02));
    }
    let passes = d.passes() - before;
    // Leading edge plus one per max_wait (1 s) at least.
    assert!(
        passes >= 5,
        "only {passes} passes in 5 s of constant triggers"
    );
    assert!(passes <= 12, "{passes} passes: the debounce did not batch");
}

// --- invariant 5: writes only while leading ------------------------------------------

#[test]
fn nothing_is_written_while_not_leading_and_losing_the_lease_stops_writes_at_once() {
    let mut config = watch_config();
    config.leader_election = true;
    let mut d = Driver::new(config);
    d.start(nodes(3));
    d.advance(secs(60.0));
    assert!(
        d.sent.is_empty() && d.condition_writes.is_empty(),
        "standby wrote: {:?}",
        d.sent
    );
    d.feed(Input::Leadership(true));
    d.answer_one(); // list
    assert!(!d.pending.is_empty(), "the leader creates routes");
    d.feed(Input::Leadership(false));
    let sent = d.sent.len();
    d.settle();
    d.node_event(NodeEvent::Added(node(
        "late",
        &["10.0.99.0/24"],
        "192.168.9.9",
    )));
    d.advance(secs(60.0));
    assert_eq!(d.sent.len(), sent, "operations sent after losing the lease");
    assert!(d.ctrl.next_deadline().is_none());
}

// --- invariant 6 / beat upstream: per-route retry -------------------------------------

#[test]
fn a_failed_create_is_retried_with_backoff_without_any_node_event() {
    let mut d = Driver::new(watch_config());
    let cidr = Cidr::parse("10.0.0.0/24").unwrap();
    d.cloud
        .break_destination(cidr, CloudErrorKind::Retry { after: None });
    d.start(nodes(1));
    assert_eq!(d.count("create"), 1);
    assert_eq!(d.events.len(), 1);
    assert_eq!(d.conditions["n0"].status, "True");
    // Retries come back with growing delays.
    d.advance(secs(30.0));
    let attempts: Vec<Duration> = d
        .sent
        .iter()
        .filter(|(_, op)| op_kind(op) == "create")
        .map(|(t, _)| *t)
        .collect();
    assert!(attempts.len() >= 4, "{attempts:?}");
    let gaps: Vec<f64> = attempts
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    assert!(gaps[0] >= 0.5 && gaps[0] <= 1.0, "{gaps:?}");
    assert!(gaps[2] > gaps[0], "backoff does not grow: {gaps:?}");
    // Heal the cloud: the next retry succeeds and the condition flips.
    d.cloud.heal_destination(cidr);
    d.advance(secs(120.0));
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.0.0/24".into())]);
    assert_eq!(d.conditions["n0"].status, "False");
    assert_eq!(
        d.count("list"),
        1,
        "retries of a clean refusal need no list"
    );
    assert!(d.metrics.passes(TriggerKind::Retry) >= 4);
}

#[test]
fn an_ambiguous_reply_makes_the_next_pass_list_first() {
    let mut d = Driver::new(watch_config());
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Ambiguous]);
    d.start(nodes(1));
    // The create took effect but its reply was lost.
    assert_eq!(d.cloud_routes().len(), 1);
    assert_eq!(d.conditions["n0"].status, "True");
    d.advance(secs(5.0));
    assert_eq!(
        d.count("list"),
        2,
        "the retry pass lists before trusting its view"
    );
    assert_eq!(
        d.count("create"),
        1,
        "the list showed the route: no second create"
    );
    assert_eq!(d.conditions["n0"].status, "False");
}

#[test]
fn already_exists_makes_the_next_pass_list_and_repair() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    // Someone else put a route for n0's CIDR to another node after our list.
    d.cloud.seed([route("x", "other", "10.0.0.0/24")]);
    d.node_event(NodeEvent::Added(nodes(1)[0].clone()));
    d.settle();
    assert_eq!(d.count("create"), 1);
    d.advance(secs(5.0));
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.0.0/24".into())]);
    assert_eq!(d.count("delete"), 1);
}

// --- invariant 7: attribution ----------------------------------------------------------

#[test]
fn every_cloud_command_carries_the_cause_that_triggered_it() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    d.node_event(NodeEvent::Added(node(
        "web-7",
        &["10.0.7.0/24"],
        "192.168.0.7",
    )));
    d.settle();
    let create = d
        .commands
        .iter()
        .find_map(|c| match c {
            Command::Cloud {
                op: CloudOp::Create { .. },
                cause,
                ..
            } => Some(cause.clone()),
            _ => None,
        })
        .expect("a create");
    assert!(create.mentions("web-7"), "{create}");
    assert_eq!(create.primary(), TriggerKind::NodeAdd);
    let report = d.reports.last().unwrap().to_string();
    assert!(
        report.contains("node web-7 added") && report.contains("routes created 1"),
        "{report}"
    );
}

// --- invariant 8: bad input ------------------------------------------------------------

#[test]
fn a_node_with_an_invalid_pod_cidr_does_not_stop_the_others() {
    let mut d = Driver::new(watch_config());
    d.start(vec![
        node("bad", &["10.0.0.0/33"], "192.168.0.1"),
        node("good", &["10.0.1.0/24"], "192.168.0.2"),
    ]);
    assert_eq!(
        d.cloud_routes(),
        vec![("good".into(), "10.0.1.0/24".into())]
    );
    assert_eq!(d.conditions["bad"].status, "True");
    assert_eq!(d.conditions["good"].status, "False");
    assert!(
        d.reports[0].problems.iter().any(|p| p.contains("bad")),
        "{:?}",
        d.reports[0]
    );
}

// --- beat upstream: zero nodes --------------------------------------------------------

#[test]
fn zero_nodes_still_get_a_pass_that_deletes_stale_routes() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("stale", "gone", "10.0.5.0/24")]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(vec![]);
    assert_eq!(d.passes(), 1);
    assert!(d.cloud_routes().is_empty());
}

// --- the watch-mode trigger filter ----------------------------------------------------

#[test]
fn label_or_heartbeat_changes_do_not_trigger_but_pod_cidr_and_address_changes_do() {
    let mut d = Driver::new(watch_config());
    let n = nodes(1)[0].clone();
    d.start(vec![n.clone()]);
    let base = d.passes();
    // A heartbeat: new resourceVersion, same routing fields.
    d.node_event(NodeEvent::Modified(bumped(n.clone(), 2)));
    // A condition change (our own write coming back).
    let mut cond = bumped(n.clone(), 3);
    cond.network_unavailable = d.conditions.get("n0").cloned();
    d.node_event(NodeEvent::Modified(cond));
    d.advance(secs(2.0));
    assert_eq!(d.passes(), base, "no pass for heartbeats or conditions");
    let mut addr = bumped(n.clone(), 4);
    addr.addresses
        .push(route_controller::model::NodeAddress::new("Hostname", "n0"));
    d.node_event(NodeEvent::Modified(addr.clone()));
    d.advance(secs(2.0));
    assert_eq!(d.passes(), base + 1, "address change triggers");
    let mut cidr = bumped(addr, 5);
    cidr.pod_cidrs = vec!["10.0.50.0/24".into()];
    d.node_event(NodeEvent::Modified(cidr));
    d.advance(secs(2.0));
    assert_eq!(d.passes(), base + 2, "pod CIDR change triggers");
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.50.0/24".into())]);
}

#[test]
fn reordered_addresses_do_not_trigger_in_our_watch_mode() {
    let mut d = Driver::new(watch_config());
    let mut n = nodes(1)[0].clone();
    n.addresses
        .push(route_controller::model::NodeAddress::new("Hostname", "n0"));
    d.start(vec![n.clone()]);
    let base = d.passes();
    let mut reordered = bumped(n, 9);
    reordered.addresses.reverse();
    d.node_event(NodeEvent::Modified(reordered));
    d.advance(secs(2.0));
    assert_eq!(d.passes(), base);
}

#[test]
fn poll_mode_ignores_node_events_and_lists_every_period() {
    let mut config = watch_config();
    config.mode = Mode::Poll;
    let mut d = Driver::new(config);
    d.start(nodes(2));
    d.node_event(NodeEvent::Added(node(
        "n9",
        &["10.0.9.0/24"],
        "192.168.0.9",
    )));
    d.settle();
    assert_eq!(d.passes(), 1, "poll mode does not react to node events");
    d.advance(secs(60.0));
    assert_eq!(d.count("list"), 7, "one list at start and one every 10 s");
    assert_eq!(d.cloud_routes().len(), 3);
}

fn poll_config() -> route_controller::Config {
    let mut config = watch_config();
    config.mode = Mode::Poll;
    config
}

/// Poll mode retries a failed create with the per-route backoff (1 s, jittered into
/// [0.5 s, 1 s]) through an early pass, which lists as every poll pass does, instead
/// of leaving it to the next poll 10 s later. Fails with `schedule_retry` for watch
/// mode only (the route is missing until the poll at 10 s).
#[test]
fn poll_mode_retries_a_failed_create_before_the_next_poll() {
    let mut d = Driver::new(poll_config());
    d.cloud
        .fail_next(Call::Create, [CloudErrorKind::Retry { after: None }]);
    d.start(nodes(2));
    assert_eq!(d.cloud_routes().len(), 1, "one create failed");
    d.advance(secs(1.5));
    assert_eq!(d.cloud_routes().len(), 2, "retried within its backoff");
    assert_eq!(
        (d.count("list"), d.count("create"), d.passes()),
        (2, 3, 2),
        "the retry is one early pass: a list and the create"
    );
    d.advance(secs(8.0)); // up to 9.5 s: the early pass moved the next poll on
    assert_eq!(d.count("list"), 2, "{:?}", sent_ops(&d));
}

/// A poll that lists the same routes after nothing but heartbeats skips planning
/// (`Quiet` in the controller), and must then do exactly what a full plan would: no
/// write. But a node changed otherwise (its condition taken back by hand) is written
/// again at the next poll, and a route changed behind the controller's back (made a
/// blackhole) is repaired. Fails with the shortcut taken after any node event (the
/// condition is never written again), without comparing the list (no repair), or
/// with the shortcut never taken (`PassReport::unchanged` stays false).
#[test]
fn a_quiet_poll_plans_again_when_anything_but_a_heartbeat_changed() {
    let mut d = Driver::new(poll_config());
    d.start(nodes(2));
    assert_eq!(d.condition_writes.len(), 2);
    let shown = |d: &Driver, i: usize| {
        let mut n = nodes(2).remove(i);
        n.network_unavailable = Some(d.condition_writes[i].1.clone());
        n
    };
    for rv in 2..5 {
        for i in 0..2 {
            let n = bumped(shown(&d, i), rv);
            d.node_event(NodeEvent::Modified(n));
        }
        d.advance(secs(10.0));
    }
    assert_eq!(
        (d.condition_writes.len(), d.count("create"), d.count("list")),
        (2, 2, 4),
        "heartbeats and polls alone write nothing: {:?}",
        sent_ops(&d)
    );
    assert_eq!(
        unchanged(&d),
        [false, false, true, true],
        "the start creates, the first poll plans and finds nothing, the later ones skip"
    );

    // Someone takes n0's condition back: the next poll writes it again.
    d.node_event(NodeEvent::Modified(bumped(nodes(2).remove(0), 9)));
    d.advance(secs(10.0));
    assert_eq!(condition_statuses(&d)[2..], [("n0", "False")]);

    // n1's route becomes a blackhole behind the controller's back: repaired.
    for i in 0..2 {
        let n = bumped(shown(&d, i), 10);
        d.node_event(NodeEvent::Modified(n));
    }
    d.advance(secs(10.0));
    d.cloud.make_blackhole(Cidr::parse("10.0.1.0/24").unwrap());
    d.advance(secs(10.0));
    assert_eq!(d.count("create"), 3, "{:?}", sent_ops(&d));
    assert_eq!(
        unchanged(&d)[4..],
        [false, false, false],
        "each pass after a change plans"
    );
}

/// Which passes skipped planning (`PassReport::unchanged`), in order.
fn unchanged(d: &Driver) -> Vec<bool> {
    d.reports.iter().map(|r| r.unchanged).collect()
}

/// Kills: `on_tables` marking every list's tables as a change. A provider that knows
/// its limits reports the tables with every list: a quiet poll must still skip its
/// plan when they are as the controller counted them, and plan when they are not.
#[test]
fn a_quiet_poll_with_route_tables_skips_planning_until_they_change() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_route_limit(Some(10));
    let mut d = Driver::with_cloud(poll_config(), cloud.clone());
    d.start(nodes(2));
    d.advance(secs(30.0));
    assert_eq!(unchanged(&d), [false, false, true, true]);
    cloud.set_route_limit(Some(20));
    d.advance(secs(20.0));
    assert_eq!(
        unchanged(&d)[4..],
        [false, true],
        "a new limit is planned with once"
    );
    assert_eq!(d.count("create"), 2, "{:?}", sent_ops(&d));
}

/// `poll_retries = false` reproduces upstream's poll mode (simulate's `poll` column):
/// the failed create waits for the poll at 10 s. Fails with the setting ignored.
#[test]
fn upstreams_poll_mode_leaves_a_failed_create_to_the_next_poll() {
    let mut config = poll_config();
    config.poll_retries = false;
    let mut d = Driver::new(config);
    d.cloud
        .fail_next(Call::Create, [CloudErrorKind::Retry { after: None }]);
    d.start(nodes(2));
    d.advance(secs(9.5));
    assert_eq!((d.cloud_routes().len(), d.count("list")), (1, 1));
    d.advance(secs(1.0));
    assert_eq!((d.cloud_routes().len(), d.count("list")), (2, 2));
}

/// A failed first list in poll mode is retried with backoff, not a period later.
/// Fails with `list_failed` leaving poll mode's list to the next poll.
#[test]
fn poll_mode_retries_a_failed_list_before_the_next_poll() {
    let mut d = Driver::new(poll_config());
    d.cloud
        .fail_next(Call::List, [CloudErrorKind::Retry { after: None }]);
    d.start(nodes(2));
    assert!(d.cloud_routes().is_empty());
    d.advance(secs(1.5));
    assert_eq!(d.cloud_routes().len(), 2, "{:?}", sent_ops(&d));
    assert_eq!(d.count("list"), 2);
}

/// A retry only ever comes sooner than the poll: a route backing off past the next
/// poll (an invalid request backs off from 30 s) is tried again by that poll, as
/// upstream's poll tries every missing route. Fails with poll passes deferring the
/// routes that back off, as watch mode's do.
#[test]
fn a_poll_never_waits_for_a_route_retry() {
    let mut d = Driver::new(poll_config());
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Invalid]);
    d.start(nodes(1));
    d.advance(secs(9.0));
    assert_eq!(d.count("create"), 1, "its retry is at least 15 s away");
    d.advance(secs(1.5));
    assert_eq!(d.count("create"), 2, "the poll at 10 s tried it again");
    assert_eq!(d.cloud_routes().len(), 1);
    d.advance(secs(30.0));
    assert_eq!(d.count("list"), 5, "the polls alone: {:?}", sent_ops(&d));
}

/// A retry whose route a pass already queued again starts no pass of its own. In poll
/// mode: a create fails just before the poll, the poll's pass sends it again, and it
/// is still in flight when its retry comes due. Fails with `Retries::taken` a no-op
/// (a third list, once the poll's pass is done).
#[test]
fn a_retry_a_pass_already_made_starts_no_pass_of_its_own() {
    let mut d = Driver::new(poll_config());
    let t0 = d.now;
    d.list(nodes(1));
    assert!(d.answer_one(), "the start-up pass's list");
    d.cloud
        .fail_next(Call::Create, [CloudErrorKind::Retry { after: None }]);
    d.now = t0 + secs(9.8);
    assert!(
        d.answer_one(),
        "the create fails at 9.8 s: its retry is due after 10.3 s"
    );
    d.now = t0 + secs(10.0);
    d.feed(Input::Tick);
    assert!(d.answer_one(), "the poll's list");
    assert_eq!(
        sent_ops(&d).last().map(String::as_str),
        Some("create 10.0.0.0/24")
    );
    d.now = t0 + secs(10.9);
    d.feed(Input::Tick);
    assert!(
        d.answer_one(),
        "the poll's create, answered after the retry was due"
    );
    d.advance(secs(5.0));
    assert_eq!(
        sent_ops(&d),
        [
            "list list",
            "create 10.0.0.0/24",
            "list list",
            "create 10.0.0.0/24"
        ]
    );
}

/// A list that succeeds makes the retry of an earlier failed one moot. The failed
/// list asked for 15 s; the poll at 10 s lists first. Fails with `list_done` keeping
/// the retry (a third list at 15 s).
#[test]
fn a_list_that_succeeds_cancels_the_retry_of_a_failed_one() {
    let mut d = Driver::new(poll_config());
    d.cloud.fail_next(
        Call::List,
        [CloudErrorKind::Retry {
            after: Some(secs(15.0)),
        }],
    );
    d.start(nodes(1));
    d.advance(secs(19.0));
    assert_eq!(d.cloud_routes().len(), 1);
    assert_eq!(d.count("list"), 2, "{:?}", sent_ops(&d));
}

// --- the resync and the view of the cloud --------------------------------------------

#[test]
fn resync_period_is_drawn_in_min_to_twice_min_and_resync_lists() {
    let mut d = Driver::new(watch_config());
    let period = d.ctrl.resync_period();
    assert!(
        period >= Duration::from_secs(12 * 3600) && period < Duration::from_secs(24 * 3600),
        "{period:?}"
    );
    d.start(nodes(1));
    d.advance(period - secs(1.0));
    assert_eq!(d.count("list"), 1);
    d.advance(secs(2.0));
    assert_eq!(d.count("list"), 2);
    assert_eq!(d.metrics.passes(TriggerKind::Resync), 1);
}

#[test]
fn a_node_change_with_a_fresh_view_costs_exactly_one_cloud_call() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    let before = d.sent.len();
    d.advance(secs(30.0));
    d.node_event(NodeEvent::Added(node(
        "n7",
        &["10.0.7.0/24"],
        "192.168.0.7",
    )));
    d.settle();
    assert_eq!(d.sent.len() - before, 1, "{:?}", &d.sent[before..]);
    // Past the view's max age, the next change lists first.
    d.advance(Duration::from_secs(301));
    d.node_event(NodeEvent::Deleted(node(
        "n7",
        &["10.0.7.0/24"],
        "192.168.0.7",
    )));
    d.settle();
    assert_eq!(d.sent.len() - before, 3);
}

#[test]
fn a_rate_limited_reply_pauses_dispatch_until_the_provider_allows_it() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    d.cloud.fail_next(
        Call::Create,
        [CloudErrorKind::RateLimited { after: secs(30.0) }],
    );
    for n in nodes(3) {
        d.node_event(NodeEvent::Added(n));
    }
    d.settle();
    d.advance(secs(29.0));
    let creates_before = d.count("create");
    assert!(d.cloud_routes().len() < 3, "{:?}", d.cloud_routes());
    d.advance(secs(2.0));
    assert_eq!(d.cloud_routes().len(), 3);
    assert!(d.count("create") > creates_before);
    assert!(
        d.events.is_empty(),
        "a rate limit is not the route's failure"
    );
}

// --- conditions and events ----------------------------------------------------------

#[test]
fn failed_create_records_upstreams_event_and_condition() {
    let mut d = Driver::new(watch_config());
    d.cloud
        .break_destination(Cidr::parse("10.0.0.0/24").unwrap(), CloudErrorKind::Invalid);
    d.start(nodes(1));
    let e = &d.events[0];
    assert_eq!(
        (e.node.as_str(), e.uid.as_str(), e.kind, e.reason),
        ("n0", "uid-n0", "Warning", "FailedToCreateRoute")
    );
    assert!(
        e.message
            .starts_with("Could not create route uid-n0 10.0.0.0/24 for node n0 after "),
        "{}",
        e.message
    );
    assert!(
        e.message
            .ends_with(": fake cloud: destination refused (invalid)"),
        "{}",
        e.message
    );
    let c = &d.conditions["n0"];
    assert_eq!(
        (c.status.as_ref(), c.reason.as_ref()),
        ("True", "NoRouteCreated")
    );
    assert_eq!(c.message, "RouteController failed to create a route");
}

#[test]
fn conditions_already_right_are_not_written_again() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    assert_eq!(d.condition_writes.len(), 2);
    d.advance(Duration::from_secs(30 * 3600));
    assert_eq!(d.condition_writes.len(), 2, "{:?}", d.condition_writes);
}

#[test]
fn a_condition_write_that_keeps_failing_is_retried_with_growing_backoff() {
    let mut d = Driver::new(watch_config());
    // As when RBAC lacks nodes/status patch: every write is refused.
    d.condition_failure = Some("403 Forbidden".into());
    d.start(nodes(1));
    d.advance(Duration::from_secs(120));
    // Backoff 1 s doubling, jittered into [½, 1] of that: at most 8 writes within two
    // minutes (1 + ½ + 1 + 2 + 4 + 8 + 16 + 32 s), rather than one a second.
    let writes = d.condition_writes.len();
    assert!(
        (6..=8).contains(&writes),
        "{writes} condition writes in two minutes"
    );
    // Once the write goes through, the node is left alone again.
    d.condition_failure = None;
    d.advance(Duration::from_secs(600));
    let after = d.condition_writes.len();
    d.advance(Duration::from_secs(3600));
    assert_eq!(d.condition_writes.len(), after);
}

// --- upstream-style watch, reproduced for comparison ----------------------------------

#[test]
fn upstream_watch_mode_reconciles_twice_at_startup_and_never_with_zero_nodes() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config.clone());
    d.start(nodes(3));
    d.advance(secs(30.0));
    assert_eq!(d.passes(), 2);
    let lists: Vec<Duration> = d
        .sent
        .iter()
        .filter(|(_, op)| op_kind(op) == "list")
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(lists.len(), 2);
    assert!((lists[1] - lists[0]).as_secs_f64() >= 9.9, "{lists:?}");

    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("stale", "gone", "10.0.5.0/24")]);
    let mut empty = Driver::with_cloud(config, cloud);
    empty.start(vec![]);
    empty.advance(secs(3600.0));
    assert_eq!(empty.passes(), 0);
    assert_eq!(
        empty.cloud_routes().len(),
        1,
        "upstream leaves the stale route"
    );
}

#[test]
fn upstream_watch_mode_does_not_retry_a_failed_create() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    let broken = Cidr::parse("10.0.0.0/24").unwrap();
    d.cloud
        .break_destination(broken, CloudErrorKind::Retry { after: None });
    d.start(nodes(2));
    d.advance(secs(3600.0));
    assert_eq!(d.passes(), 2, "two startup passes, then nothing");
    assert_eq!(
        d.count("create"),
        3,
        "n1 once; n0 in both startup passes; no retry follows"
    );
}

#[test]
fn upstream_watch_mode_spaces_passes_by_ten_seconds_under_an_event_storm() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    d.start(nodes(1));
    d.advance(secs(20.0));
    let before = d.passes();
    let n = nodes(1)[0].clone();
    for i in 0..600u64 {
        let mut changed = bumped(n.clone(), 100 + i);
        changed.addresses = vec![route_controller::model::NodeAddress::internal_ip(&format!(
            "192.168.3.{}",
            i % 250
        ))];
        d.node_event(NodeEvent::Modified(changed));
        d.advance(secs(0.1));
    }
    let passes = d.passes() - before;
    assert!((6..=8).contains(&passes), "{passes} passes in 60 s");
}

// --- helpers ----------------------------------------------------------------------------

/// Every operation sent so far, as `"<kind> <destination>"`.
fn sent_ops(d: &Driver) -> Vec<String> {
    d.sent
        .iter()
        .map(|(_, op)| format!("{} {}", op_kind(op), destination(op)))
        .collect()
}

/// Every condition written so far, as `(node, status)`.
fn condition_statuses(d: &Driver) -> Vec<(&str, &str)> {
    d.condition_writes
        .iter()
        .map(|(n, c)| (n.as_str(), c.status.as_ref()))
        .collect()
}

fn destination(op: &CloudOp) -> String {
    match op {
        CloudOp::Create { route, .. } | CloudOp::Delete { route, .. } => {
            route.destination_cidr.clone()
        }
        CloudOp::List { .. } => "list".into(),
        other => panic!("an operation this test does not know: {other:?}"),
    }
}

#[test]
fn a_queued_create_for_a_node_deleted_before_it_is_sent_is_never_sent() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(3));
    d.answer_one(); // the list; n0's create goes out, n1 and n2 wait in the queue
    d.node_event(NodeEvent::Deleted(nodes(3)[2].clone()));
    d.settle();
    d.advance(secs(5.0));
    let created: Vec<String> = d
        .sent
        .iter()
        .filter_map(|(_, op)| match op {
            CloudOp::Create { route, .. } => Some(route.target_node.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created, vec!["n0", "n1"]);
    assert_eq!(d.count("delete"), 0);
}

#[test]
fn passes_that_repeat_an_operation_in_flight_cause_no_follow_up_passes() {
    // One call at a time, as with Hetzner's one action per network: while a create is in
    // flight, another node arrives and the next pass plans that create again.
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.start(vec![]);
    for pair in nodes(10).chunks(2) {
        d.node_event(NodeEvent::Added(pair[0].clone())); // a pass; its create goes out
        d.now += secs(0.01);
        d.node_event(NodeEvent::Added(pair[1].clone()));
        d.now += secs(0.1);
        d.feed(Input::Tick); // the second pass: the first create is still in flight
        while d.answer_one() {
            d.now += secs(0.1);
            d.feed(Input::Tick);
        }
        d.now += secs(1.0);
        d.feed(Input::Tick);
    }
    d.advance(secs(10.0));
    assert_eq!(d.cloud_routes().len(), 10);
    assert_eq!(d.count("create"), 10);
    assert_eq!(
        d.metrics.passes(TriggerKind::Retry),
        0,
        "follow-up passes: {:#?}",
        d.reports
    );
}

// --- invariant 10: the cloud's budget is spent by the controller ---------------------

/// A budget of one request per second and no burst beyond the first request: the
/// list goes out at once, then one create per second.
fn budget_config() -> route_controller::Config {
    let mut config = watch_config();
    config.budget = Some(route_controller::Budget::new(1.0, 1));
    config
}

/// Guards the budget's pacing in the controller: with a budget of 1 request/s no two
/// operations leave within a second, and next_deadline wakes the controller for each
/// (break `Spending::can_send` and all creates go out with the list's reply).
#[test]
fn the_budget_spaces_dispatches_through_next_deadline() {
    let mut d = Driver::new(budget_config());
    d.list(nodes(4));
    d.settle();
    assert_eq!(d.count("list"), 1);
    assert_eq!(d.count("create"), 0, "the list spent the only token");
    d.advance(secs(10.0));
    let times: Vec<f64> = d.sent.iter().map(|(t, _)| t.as_secs_f64()).collect();
    assert_eq!(times.len(), 5, "{times:?}");
    for pair in times.windows(2) {
        assert!(
            pair[1] - pair[0] >= 0.999,
            "sent closer than the budget allows: {times:?}"
        );
    }
    assert_eq!(d.cloud_routes().len(), 4);
}

/// Guards that operations wait in the controller's queue, not in a worker: a create
/// for a node deleted while it waited for budget is never sent (if dispatch sent
/// everything at once and let a worker wait, n2's create would go out).
#[test]
fn a_create_for_a_node_deleted_while_it_waited_for_budget_is_never_sent() {
    let mut d = Driver::new(budget_config());
    d.list(nodes(3));
    d.settle(); // the list; the three creates wait for budget
    assert_eq!(d.count("create"), 0);
    d.node_event(NodeEvent::Deleted(nodes(3)[2].clone()));
    d.advance(secs(10.0));
    let created: Vec<String> = d
        .sent
        .iter()
        .filter_map(|(_, op)| match op {
            CloudOp::Create { route, .. } => Some(route.target_node.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created, vec!["n0", "n1"]);
}

/// The same with Hetzner's shape of budget (one change at a time, two requests each)
/// when the wait comes from a reply: the cloud says its budget is spent, the next
/// create waits in the queue, and its node is deleted meanwhile. If the reply's
/// observation were ignored, n1's create would go out with the reply.
#[test]
fn a_create_held_back_by_a_replys_budget_report_is_dropped_when_its_node_goes() {
    let mut config = watch_config();
    let budget = route_controller::Budget::new(1.0, 3600);
    config.budget = Some(budget.mutations_at_once(1).requests_per_op(1, 2, 2));
    let mut d = Driver::new(config);
    d.list(nodes(3));
    assert!(d.answer_one()); // the list; n0's create goes out
    let (id, op) = d.pending.pop_front().expect("n0's create is sent");
    let reply = route_controller::run_op(d.cloud.as_ref(), "kubernetes", &op, &d.metrics);
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Spent(Usage::new(2).remaining(Some(3600), 0)),
    });
    d.feed(Input::Cloud { id, reply });
    assert_eq!(d.count("create"), 1, "n1's create waits for budget");
    d.now += secs(0.5);
    d.node_event(NodeEvent::Deleted(nodes(3)[1].clone()));
    d.advance(secs(10.0));
    let created: Vec<String> = d
        .sent
        .iter()
        .filter_map(|(_, op)| match op {
            CloudOp::Create { route, .. } => Some(route.target_node.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(created, vec!["n0", "n2"]);
}

/// Answers the first create under `budget` (one change at a time) with `spent` and
/// returns how long after that reply the second create goes out, stepping the
/// controller from deadline to deadline.
fn second_create_after(budget: route_controller::Budget, spent: Usage) -> Duration {
    let mut config = watch_config();
    config.budget = Some(budget.mutations_at_once(1));
    let mut d = Driver::new(config);
    d.list(nodes(2));
    assert!(d.answer_one()); // the list; n0's create goes out
    let (id, op) = d.pending.pop_front().expect("n0's create is sent");
    assert_eq!(op_kind(&op), "create");
    let reply = route_controller::run_op(d.cloud.as_ref(), "kubernetes", &op, &d.metrics);
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Spent(spent),
    });
    d.feed(Input::Cloud { id, reply });
    let replied = d.elapsed();
    while d.count("create") < 2 {
        let deadline = d
            .ctrl
            .next_deadline()
            .expect("the second create waits for a deadline");
        assert!(
            deadline - d.t0 < replied + secs(60.0),
            "no create within a minute"
        );
        d.now = d.now.max(deadline);
        d.feed(Input::Tick);
    }
    create_times(&d)[1] - replied
}

/// Guards that a reply's rate-limit observation reaches the budget
/// (`Spending::settle`): the cloud saying that nothing is left holds the next create
/// back until a token has refilled (1 s at 1/s), while a cloud with budget to spare
/// lets it out with the reply. Skip `observe_budget` in `settle` and the first case
/// sends at once.
#[test]
fn a_reply_saying_the_budget_is_spent_delays_the_next_create() {
    let budget = route_controller::Budget::new(1.0, 10);
    let spare = second_create_after(budget, Usage::new(1).remaining(Some(10), 9));
    assert_eq!(spare, Duration::ZERO);
    let spent = second_create_after(budget, Usage::new(1).remaining(Some(10), 0));
    assert_eq!(spent, secs(1.0), "the cloud said nothing is left");
    // A refusal seen on the way (a throttled action poll) holds everything back for
    // its Retry-After, though the operation itself succeeded.
    let throttled = second_create_after(budget, Usage::new(1).throttled(secs(7.0)));
    assert_eq!(throttled, secs(7.0));
}

/// Guards that an operation is charged its real request cost: a create declared at 2
/// requests (Hetzner's change and one poll) that took 5 (three more polls) puts the
/// bucket 3 requests in debt, so the next create waits 4 s instead of 1 s; one that
/// sent nothing gets its charge back and the next goes at once. Drop the correction
/// in `Spending::settle` and all three wait 1 s.
#[test]
fn an_operation_is_charged_the_requests_its_reply_reports() {
    // 4 tokens: the list takes 1, the first create 2; 1 is left.
    let budget = route_controller::Budget::new(1.0, 4).requests_per_op(1, 2, 2);
    assert_eq!(second_create_after(budget, Usage::new(2)), secs(1.0));
    assert_eq!(second_create_after(budget, Usage::new(5)), secs(4.0));
    assert_eq!(second_create_after(budget, Usage::new(0)), Duration::ZERO);
}

/// Guards `mutations_at_once`: with Hetzner's one change at a time, a second create
/// waits for the first one's reply even with budget to spare.
#[test]
fn mutations_at_once_bounds_route_changes_in_flight() {
    let mut config = watch_config();
    config.budget = Some(route_controller::Budget::new(100.0, 100).mutations_at_once(1));
    let mut d = Driver::new(config);
    d.list(nodes(3));
    assert!(d.answer_one()); // the list
    assert_eq!(d.pending.len(), 1, "one create in flight, two queued");
    d.settle();
    assert_eq!(d.count("create"), 3);
}

// --- rules pinned exactly (issue 16): each test names the mutation it kills ------------

/// The creates' send times, since the start.
fn create_times(d: &Driver) -> Vec<Duration> {
    d.sent
        .iter()
        .filter(|(_, op)| op_kind(op) == "create")
        .map(|(t, _)| *t)
        .collect()
}

fn gaps(times: &[Duration]) -> Vec<f64> {
    times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect()
}

/// Kills: dropping `!self.leading` from `write_condition`, and from the
/// FailedToCreateRoute event path (`failed_create_event`). Replies to operations sent
/// before the lease was lost still arrive; none of them may lead to a write.
#[test]
fn after_the_lease_is_lost_no_condition_is_written_and_no_event_recorded() {
    let mut config = watch_config();
    config.leader_election = true;
    let mut d = Driver::new(config);
    // n0's create is refused (an event and a True condition would follow), n1's and
    // n2's succeed (False conditions would follow).
    d.cloud
        .break_destination(Cidr::parse("10.0.0.0/24").unwrap(), CloudErrorKind::Invalid);
    d.list(nodes(3));
    d.feed(Input::Leadership(true));
    d.answer_one(); // the list; three creates go out
    assert_eq!(d.pending.len(), 3, "{:?}", d.pending);
    assert!(d.condition_writes.is_empty() && d.events.is_empty());
    d.feed(Input::Leadership(false));
    let commands_at_loss = d.commands.len();
    d.settle(); // the three replies arrive after the loss
    d.advance(secs(600.0));
    let writes: Vec<&Command> = d.commands[commands_at_loss..]
        .iter()
        .filter(|c| {
            matches!(
                c,
                Command::WriteCondition { .. }
                    | Command::RecordEvent { .. }
                    | Command::Cloud { .. }
            )
        })
        .collect();
    assert!(
        writes.is_empty(),
        "written after the lease was lost: {writes:#?}"
    );
    assert_eq!(d.cloud_routes().len(), 2, "the replies still happened");
}

/// Kills: dropping `self.cancel_queued(..)` on the loss of the lease. The queued
/// operations are dropped at once: the pass that planned them reports them deferred as
/// soon as its one operation in flight is answered, and a later term never sends an
/// operation planned in the old one.
#[test]
fn losing_the_lease_drops_the_queued_operations_at_once() {
    let mut config = watch_config();
    config.leader_election = true;
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(3));
    d.feed(Input::Leadership(true));
    d.answer_one(); // the list; n0's create goes out, n1's and n2's wait in the queue
    assert_eq!(d.pending.len(), 1);
    d.feed(Input::Leadership(false));
    d.settle();
    let report = d.reports.last().expect("the cut-off pass reports");
    assert_eq!(
        (report.cause.pass, report.created, report.deferred),
        (1, 1, 2),
        "{report}"
    );
    // A new term: the new pass lists and plans again; every operation it sends is its own.
    d.feed(Input::Leadership(true));
    d.settle();
    let passes_of_creates: Vec<u64> = d
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::Cloud {
                op: CloudOp::Create { .. },
                cause,
                ..
            } => Some(cause.pass),
            _ => None,
        })
        .collect();
    assert_eq!(passes_of_creates, vec![1, 2, 2], "{:#?}", d.reports);
    assert_eq!(d.cloud_routes().len(), 3);
}

/// Kills: dropping the `synced` guards (`can_write`, `take_next(self.synced)`,
/// `node_trigger`, `on_leadership`) together. The lease is won halfway through the first
/// list, while the node view still misses n0 and n1: nothing may be sent, not even a
/// list; once the list is complete the routes of n0 and n1 stay. The same during a
/// relist.
#[test]
fn a_lease_won_during_the_first_list_or_a_relist_deletes_nothing() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("a", "n0", "10.0.0.0/24"),
        route("b", "n1", "10.0.1.0/24"),
    ]);
    let mut config = watch_config();
    config.leader_election = true;
    let mut d = Driver::with_cloud(config, cloud);
    d.node_event(NodeEvent::Init);
    d.node_event(NodeEvent::InitApply(node(
        "n2",
        &["10.0.2.0/24"],
        "192.168.0.2",
    )));
    d.feed(Input::Leadership(true));
    d.node_event(NodeEvent::Added(node(
        "n3",
        &["10.0.3.0/24"],
        "192.168.0.3",
    )));
    d.advance(secs(60.0));
    assert!(
        d.sent.is_empty(),
        "sent during the first list: {:?}",
        d.sent
    );
    assert_eq!(d.ctrl.next_deadline(), None);
    d.node_event(NodeEvent::InitApply(node(
        "n0",
        &["10.0.0.0/24"],
        "192.168.0.0",
    )));
    d.node_event(NodeEvent::InitApply(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.node_event(NodeEvent::InitDone);
    d.advance(secs(5.0));
    assert_eq!(d.count("delete"), 0);
    assert_eq!(d.cloud_routes().len(), 4, "{:?}", d.cloud_routes());

    // A relist that starts while standing by and is won halfway through.
    d.feed(Input::Leadership(false));
    d.node_event(NodeEvent::Init);
    d.node_event(NodeEvent::InitApply(node(
        "n2",
        &["10.0.2.0/24"],
        "192.168.0.2",
    )));
    let sent = d.sent.len();
    d.feed(Input::Leadership(true));
    d.advance(secs(60.0));
    assert_eq!(
        d.sent.len(),
        sent,
        "sent during a relist: {:?}",
        &d.sent[sent..]
    );
    for n in ["n0", "n1", "n3"] {
        let i = &n[1..];
        d.node_event(NodeEvent::InitApply(node(
            n,
            &[&format!("10.0.{i}.0/24")],
            &format!("192.168.0.{i}"),
        )));
    }
    d.node_event(NodeEvent::InitDone);
    d.advance(secs(5.0));
    assert_eq!(d.count("delete"), 0);
    assert_eq!(d.cloud_routes().len(), 4);
}

/// Kills: no doubling (`1u32 << ..` replaced by 1), no cap (`.min(retry_max)` dropped),
/// and no jitter. Every gap between attempts lies in [½, 1] × min(1 s × 2^(n-1), 5 min),
/// and jitter spreads them (not all at the top of their range, nor all at the bottom).
#[test]
fn retries_back_off_exponentially_from_one_second_to_five_minutes_with_jitter() {
    let mut d = Driver::new(watch_config());
    d.cloud.break_destination(
        Cidr::parse("10.0.0.0/24").unwrap(),
        CloudErrorKind::Retry { after: None },
    );
    d.start(nodes(1));
    d.advance(Duration::from_secs(4 * 3600));
    let gaps = gaps(&create_times(&d));
    // 1 + 2 + … + 256 s = 511 s, then 300 s each: 9 + (14 400 - 511) / 300 ≥ 55 gaps.
    assert!(
        gaps.len() >= 50,
        "{} attempts in 4 h: {gaps:?}",
        gaps.len() + 1
    );
    for (i, gap) in gaps.iter().enumerate() {
        let full = (2f64.powi(i as i32)).min(300.0);
        assert!(
            *gap >= full / 2.0 - 1e-6 && *gap <= full + 1e-6,
            "gap {} is {gap} s, outside [{}, {full}] s: {gaps:?}",
            i + 1,
            full / 2.0
        );
    }
    let low = gaps
        .iter()
        .enumerate()
        .filter(|(i, g)| **g < 0.9 * (2f64.powi(*i as i32)).min(300.0))
        .count();
    assert!(low >= gaps.len() / 4, "no jitter: {gaps:?}");
    // Nor all at the bottom: kills `Retries::draw` returning 0.0.
    let high = gaps
        .iter()
        .enumerate()
        .filter(|(i, g)| **g > 0.6 * (2f64.powi(*i as i32)).min(300.0))
        .count();
    assert!(high >= gaps.len() / 4, "no jitter: {gaps:?}");
}

/// Kills: swapping (or unifying) the bases of the backoff: a conflict retries from
/// ½ s (another change runs; it ends soon), an invalid request from 30 s (it will not
/// go through by itself soon), doubling as any other.
#[test]
fn conflicts_retry_sooner_and_invalid_requests_later() {
    for (kind, first) in [
        (CloudErrorKind::Conflict, 0.5),
        (CloudErrorKind::Invalid, 30.0),
    ] {
        let mut d = Driver::new(watch_config());
        d.cloud
            .break_destination(Cidr::parse("10.0.0.0/24").unwrap(), kind);
        d.start(nodes(1));
        d.advance(secs(first * 8.0));
        let gaps = gaps(&create_times(&d));
        assert!(gaps.len() >= 3, "{kind:?}: {gaps:?}");
        for (i, gap) in gaps.iter().take(3).enumerate() {
            let full = first * 2f64.powi(i as i32);
            assert!(
                *gap >= full / 2.0 - 1e-6 && *gap <= full + 1e-6,
                "{kind:?}: gap {} is {gap} s, outside [{}, {full}] s",
                i + 1,
                full / 2.0
            );
        }
    }
}

/// Kills: dropping `self.planning.is_none()` from `may_start_pass`. While a pass waits
/// for its list, triggers only collect: the list in flight is followed by exactly one
/// pass for all of them.
#[test]
fn triggers_while_a_list_is_in_flight_fold_into_exactly_one_follow_up() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(1));
    // Past the view's max age, the next change lists first.
    d.advance(Duration::from_secs(301));
    let before = d.passes();
    let lists = d.count("list");
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    assert_eq!(d.passes() - before, 1);
    assert_eq!(d.count("list"), lists + 1, "the pass lists");
    // The list stays unanswered for 10 s while four more nodes arrive, 2 s apart.
    for i in 2..6 {
        d.now += secs(2.0);
        d.node_event(NodeEvent::Added(node(
            &format!("n{i}"),
            &[&format!("10.0.{i}.0/24")],
            &format!("192.168.0.{i}"),
        )));
        d.feed(Input::Tick);
    }
    d.now += secs(2.0);
    d.feed(Input::Tick);
    assert_eq!(
        d.passes() - before,
        1,
        "passes started while a list was in flight"
    );
    assert_eq!(d.pending.len(), 1, "only the list: {:?}", d.pending);
    d.advance(secs(10.0));
    assert_eq!(
        d.passes() - before,
        2,
        "one follow-up for the four: {:#?}",
        d.reports
    );
    assert_eq!(d.cloud_routes().len(), 6);
    let followup = d
        .reports
        .iter()
        .max_by_key(|r| r.cause.pass)
        .expect("reports");
    assert_eq!(followup.cause.total(), 4, "{followup}");
}

/// Kills: a per-destination retry instead of a global pause (dropping `paused_until`
/// from the rate-limited reply, or from `dispatch`). From the refusal until the instant
/// the provider named, not one call goes out; then the refused create goes first.
#[test]
fn a_rate_limited_reply_stops_every_call_until_the_instant_the_provider_named() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.cloud.fail_next(
        Call::Create,
        [CloudErrorKind::RateLimited { after: secs(30.0) }],
    );
    d.list(nodes(3));
    d.answer_one(); // the list; n0's create goes out
    let refused_at = d.elapsed();
    d.answer_one(); // refused: 30 s
    assert!(
        d.pending.is_empty(),
        "sent after the refusal: {:?}",
        d.pending
    );
    d.advance(secs(29.999));
    let during: Vec<_> = d.sent.iter().filter(|(t, _)| *t > refused_at).collect();
    assert!(during.is_empty(), "calls during the pause: {during:?}");
    d.advance(secs(0.002));
    let after: Vec<(Duration, String)> = d
        .sent
        .iter()
        .filter(|(t, _)| *t > refused_at)
        .map(|(t, op)| (*t - refused_at, destination(op)))
        .collect();
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(
        after[0],
        (secs(30.0), "10.0.0.0/24".to_string()),
        "{after:?}"
    );
    assert_eq!(d.cloud_routes().len(), 3);
    assert!(
        d.events.is_empty(),
        "a rate limit is not the route's failure"
    );
}

/// Kills: dropping `self.followups.insert(cidr)`. n0 is deleted and its route's delete
/// is in flight when n9 takes over its pod CIDR: the pass for n9 cannot send the
/// create (the destination is busy), so once the delete is answered exactly one
/// follow-up pass creates it, without any other trigger.
#[test]
fn a_busy_destination_gets_exactly_one_follow_up_pass_when_it_is_answered() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    let n0 = nodes(1)[0].clone();
    d.now += secs(5.0);
    d.node_event(NodeEvent::Deleted(n0));
    assert_eq!(
        d.pending.len(),
        1,
        "the delete is in flight: {:?}",
        d.pending
    );
    d.now += secs(5.0);
    d.node_event(NodeEvent::Added(node(
        "n9",
        &["10.0.0.0/24"],
        "192.168.0.9",
    )));
    d.feed(Input::Tick);
    assert_eq!(d.count("create"), 2, "the create must wait for the delete");
    let followups = d.metrics.passes(TriggerKind::Retry);
    d.settle();
    d.advance(secs(3600.0));
    assert_eq!(
        d.cloud_routes(),
        vec![
            ("n1".into(), "10.0.1.0/24".into()),
            ("n9".into(), "10.0.0.0/24".into())
        ]
    );
    assert_eq!(d.metrics.passes(TriggerKind::Retry) - followups, 1);
    assert!(
        d.reports
            .last()
            .unwrap()
            .cause
            .to_string()
            .contains("follow-up for route 10.0.0.0/24"),
        "{}",
        d.reports.last().unwrap()
    );
}

/// Kills: any other debounce than the documented 50 ms (`Config::new`). After a pass, a
/// change within 50 ms of the last one waits until 50 ms have passed without a change:
/// the deadline is exactly that instant, and the pass starts there, not before.
#[test]
fn a_change_soon_after_another_waits_exactly_the_50_ms_debounce() {
    let mut d = Driver::new(watch_config());
    d.start(vec![]);
    d.now += secs(10.0);
    let before = d.passes();
    d.node_event(NodeEvent::Added(nodes(1)[0].clone()));
    d.settle();
    assert_eq!(d.passes() - before, 1, "leading edge: at once");
    d.now += secs(0.02);
    d.node_event(NodeEvent::Added(nodes(2)[1].clone()));
    d.now += secs(0.02);
    d.node_event(NodeEvent::Added(nodes(3)[2].clone()));
    let last = d.now;
    assert_eq!(
        d.ctrl.next_deadline(),
        Some(last + Duration::from_millis(50))
    );
    d.now = last + Duration::from_millis(49);
    d.feed(Input::Tick);
    assert_eq!(d.passes() - before, 1, "started before the debounce ended");
    d.now = last + Duration::from_millis(50);
    d.feed(Input::Tick);
    assert_eq!(d.passes() - before, 2);
    // After a quiet 50 ms, the next change starts at once again.
    d.settle();
    d.now += Duration::from_millis(50);
    d.node_event(NodeEvent::Added(nodes(4)[3].clone()));
    assert_eq!(d.passes() - before, 3);
}

/// Kills (cargo-mutants): `force_list |= …` made `&=` in the scheduler's `Pending::add`.
/// A new term lists the routes even when the view is fresh (another leader may have
/// changed them), and so does the resync, which no view age can skip.
#[test]
fn a_new_term_and_the_resync_list_even_with_a_fresh_view() {
    let mut config = watch_config();
    config.leader_election = true;
    config.route_view_max_age = Duration::from_secs(100 * 3600);
    let mut d = Driver::new(config);
    d.list(nodes(1));
    d.feed(Input::Leadership(true));
    d.settle();
    assert_eq!(d.count("list"), 1);
    d.advance(secs(10.0));
    d.feed(Input::Leadership(false));
    d.advance(secs(10.0));
    d.feed(Input::Leadership(true));
    d.settle();
    assert_eq!(d.count("list"), 2, "the new term did not list");
    d.advance(d.ctrl.resync_period());
    assert_eq!(d.count("list"), 3, "the resync did not list");
    assert_eq!(d.metrics.passes(TriggerKind::Resync), 1);
}

/// Kills (cargo-mutants): `||` made `&&` in the scheduler's `has_pending` (upstream's
/// parked triggers no longer count as coalesced), and `Pending::merge` made a no-op (the
/// triggers parked while a pass runs would be lost from the next pass's cause and
/// from the trigger-to-pass latency that `simulate` reports for upstream's mode).
#[test]
fn upstream_watch_mode_folds_parked_triggers_into_the_next_pass() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    let n = nodes(1)[0].clone();
    let moved = |rv: u64, ip: &str| {
        let mut m = bumped(n.clone(), rv);
        m.addresses = vec![route_controller::model::NodeAddress::internal_ip(ip)];
        NodeEvent::Modified(m)
    };
    d.start(vec![n.clone()]);
    d.advance(secs(30.0));
    // A takes the token that is free now; its pass runs at once.
    d.node_event(moved(20, "192.168.5.1"));
    d.settle();
    let coalesced = d.metrics.triggers_coalesced.get();
    // B must wait for the next token (10 s): it is parked, nothing else pending.
    d.now += secs(1.0);
    d.node_event(moved(21, "192.168.5.2"));
    assert_eq!(
        d.metrics.triggers_coalesced.get(),
        coalesced,
        "B joined nothing"
    );
    // C joins B's parked batch.
    d.now += secs(1.0);
    d.node_event(moved(22, "192.168.5.3"));
    assert_eq!(
        d.metrics.triggers_coalesced.get(),
        coalesced + 1,
        "C joins B"
    );
    let passes = d.passes();
    d.advance(secs(20.0));
    assert_eq!(d.passes() - passes, 1);
    assert_eq!(
        d.reports.last().unwrap().cause.total(),
        2,
        "{}",
        d.reports.last().unwrap()
    );

    // A pass in flight (its list unanswered) for 25 s: D waits for its token (10 s),
    // then is queued behind the pass; E, parked meanwhile, comes due while D is queued
    // and is merged into D's batch; the next pass serves both.
    d.advance(secs(30.0));
    d.node_event(moved(30, "192.168.5.4")); // starts a pass; its list stays pending
    assert_eq!(d.pending.len(), 1, "{:?}", d.pending);
    d.now += secs(0.5);
    d.node_event(moved(31, "192.168.5.5")); // D: parked until +10 s
    d.now += secs(10.0);
    d.feed(Input::Tick); // D is queued; the pass still runs
    d.now += secs(0.5);
    d.node_event(moved(32, "192.168.5.6")); // E: parked until +20 s
    d.now += secs(10.0);
    d.feed(Input::Tick); // E's time has come; merged into D's batch
    assert_eq!(d.pending.len(), 1, "the pass still waits for its list");
    let passes = d.passes();
    d.settle();
    d.advance(secs(1.0));
    assert_eq!(d.passes() - passes, 1);
    let last = d.reports.last().unwrap();
    assert_eq!(last.cause.total(), 2, "D and E in one pass: {last}");
}

/// Kills (cargo-mutants): `Scheduler::clear` made a no-op on the loss of the lease.
/// Triggers waiting when the lease is lost are moot (the next term lists and plans
/// everything): the new term's first pass is caused by the leadership alone, and no
/// trigger-to-pass latency spans the time spent standing by.
#[test]
fn triggers_pending_when_the_lease_is_lost_are_dropped() {
    let mut config = watch_config();
    config.leader_election = true;
    let mut d = Driver::new(config);
    d.list(nodes(2));
    d.feed(Input::Leadership(true));
    d.settle();
    d.now += secs(5.0);
    d.node_event(NodeEvent::Added(node(
        "n5",
        &["10.0.5.0/24"],
        "192.168.0.5",
    )));
    d.settle();
    // Within the debounce: this one waits, then the lease goes.
    d.now += secs(0.01);
    d.node_event(NodeEvent::Added(node(
        "n6",
        &["10.0.6.0/24"],
        "192.168.0.6",
    )));
    d.feed(Input::Leadership(false));
    let observed = d.metrics.trigger_to_pass.count();
    d.advance(secs(60.0));
    d.feed(Input::Leadership(true));
    d.settle();
    let first = d.reports.last().expect("the new term's pass");
    assert_eq!(first.cause.samples, vec![Trigger::Leadership], "{first}");
    assert_eq!(d.metrics.trigger_to_pass.count(), observed + 1);
    assert_eq!(d.cloud_routes().len(), 4);
}

/// The lists' send times, since the start.
fn list_times(d: &Driver) -> Vec<Duration> {
    d.sent
        .iter()
        .filter(|(_, op)| op_kind(op) == "list")
        .map(|(t, _)| *t)
        .collect()
}

/// Kills (cargo-mutants, before the reorganisation): `list_failed` made a no-op, its
/// failure count not incremented, `now + delay` made `now - delay`. A failed list is
/// retried on its own, with the same backoff as a route: [½, 1] × 1 s doubling.
#[test]
fn a_failed_list_is_retried_with_backoff() {
    let mut d = Driver::new(watch_config());
    d.cloud.fail_next(
        Call::List,
        [
            CloudErrorKind::Ambiguous,
            CloudErrorKind::Ambiguous,
            CloudErrorKind::Ambiguous,
        ],
    );
    d.start(nodes(1));
    d.advance(secs(30.0));
    let gaps = gaps(&list_times(&d));
    assert_eq!(
        gaps.len(),
        3,
        "three failures, then the list that worked: {gaps:?}"
    );
    for (i, gap) in gaps.iter().enumerate() {
        let full = 2f64.powi(i as i32);
        assert!(
            *gap >= full / 2.0 - 1e-6 && *gap <= full + 1e-6,
            "gap {} is {gap} s, outside [{}, {full}] s",
            i + 1,
            full / 2.0
        );
    }
    assert_eq!(d.cloud_routes().len(), 1);
}

/// Kills (cargo-mutants, before the reorganisation): the `Retry { after: Some(..) }`
/// arms of the route and the list retries. A provider's Retry-After is honoured exactly,
/// for a route operation and for a list.
#[test]
fn a_retry_after_from_the_provider_is_honoured_for_routes_and_lists() {
    let mut d = Driver::new(watch_config());
    d.cloud.fail_next(
        Call::List,
        [CloudErrorKind::Retry {
            after: Some(secs(7.0)),
        }],
    );
    d.cloud.fail_next(
        Call::Create,
        [CloudErrorKind::Retry {
            after: Some(secs(42.0)),
        }],
    );
    d.start(nodes(1));
    d.advance(secs(120.0));
    assert_eq!(gaps(&list_times(&d)), vec![7.0]);
    assert_eq!(gaps(&create_times(&d)), vec![42.0]);
    assert_eq!(d.cloud_routes().len(), 1);
}

/// Kills (cargo-mutants, before the reorganisation): `abandon_planning` made a no-op.
/// A pass that waits to list when the lease is lost ends at once with its reason, and
/// the next term's pass is a new one.
#[test]
fn a_pass_waiting_to_list_when_the_lease_is_lost_ends_with_its_reason() {
    let mut config = watch_config();
    config.leader_election = true;
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(2));
    d.feed(Input::Leadership(true));
    d.answer_one(); // the list; n0's create goes out
    // An ambiguous reply: the next pass must list, and waits until nothing is in flight.
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Ambiguous]);
    d.answer_one(); // n0's create: ambiguous; n1's goes out
    d.now += secs(2.0);
    d.feed(Input::Tick); // the retry pass wants to list; n1's create is in flight
    let waiting = d.passes();
    d.feed(Input::Leadership(false));
    let cancelled = d
        .reports
        .iter()
        .find(|r| r.cause.pass == waiting)
        .unwrap_or_else(|| panic!("pass {waiting} did not end: {:#?}", d.reports));
    assert_eq!(
        cancelled.list_error.as_deref(),
        Some("cancelled before listing"),
        "{cancelled}"
    );
}

/// Kills (cargo-mutants, before the reorganisation): a created route entered into the
/// view without `enable_node_addresses` although the provider's routes carry them. With
/// such a provider, an address change after a create replaces the route without
/// waiting for a list.
#[test]
fn a_route_created_on_a_provider_that_carries_addresses_is_replaced_when_they_change() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_report_node_addresses(true);
    let mut seeded = route("a", "n0", "10.0.0.0/24");
    seeded.target_node_addresses = vec![route_controller::model::NodeAddress::internal_ip(
        "192.168.0.0",
    )];
    cloud.seed([seeded]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(2));
    assert_eq!(
        (d.count("list"), d.count("create"), d.count("delete")),
        (1, 1, 0)
    );
    d.now += secs(5.0);
    let mut moved = bumped(nodes(2)[1].clone(), 9);
    moved.addresses = vec![route_controller::model::NodeAddress::internal_ip(
        "192.168.7.7",
    )];
    d.node_event(NodeEvent::Modified(moved));
    d.advance(secs(5.0));
    assert_eq!(
        (d.count("list"), d.count("create"), d.count("delete")),
        (1, 2, 1),
        "n1's route is replaced, without a list: {:?}",
        d.sent
    );
}

/// Kills: the delete's follow-up taken for a replacement whose create is queued behind
/// it (`Operations::create_queued` in `on_op_done`). In poll mode every pass lists,
/// so that follow-up was a list more per replaced route (simulate's address-churn
/// showed 641 lists an hour for poll's 360). An address change is replaced by the next
/// poll's pass: one list, one delete, one create, and no pass until the poll after.
#[test]
fn a_replacement_in_poll_mode_costs_no_pass_between_polls() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_report_node_addresses(true);
    let mut config = watch_config();
    config.mode = Mode::Poll;
    let period = config.route_reconciliation_period;
    let mut d = Driver::with_cloud(config, cloud);
    d.start(nodes(2));
    let (passes, lists) = (d.passes(), d.count("list"));
    d.now += secs(1.0);
    let mut moved = bumped(nodes(2)[1].clone(), 9);
    moved.addresses = vec![route_controller::model::NodeAddress::internal_ip(
        "192.168.7.7",
    )];
    d.node_event(NodeEvent::Modified(moved));
    // Up to just before the second poll after the start.
    d.advance(2 * period - secs(1.1));
    assert_eq!(
        (
            d.passes() - passes,
            d.count("list") - lists,
            d.count("create"),
            d.count("delete")
        ),
        (1, 1, 3, 1),
        "one poll's pass replaces n1's route: {:?}",
        d.sent
    );
    assert_eq!(d.cloud_routes().len(), 2);
}

/// Kills (cargo-mutants, before the reorganisation): `now + after` made `now - after`
/// for a rate-limited list. Operations queued behind a pass that lists wait out the
/// provider's limit too: nothing goes out until it ends.
#[test]
fn a_rate_limited_list_pauses_the_queued_operations_too() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(3));
    d.answer_one(); // the list; n0's create goes out, n1's and n2's wait
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Ambiguous]);
    d.answer_one(); // n0's create: ambiguous, so the next pass lists; n1's goes out
    d.now += secs(2.0);
    d.feed(Input::Tick); // the retry pass waits to list; n2's create stays queued
    d.cloud.fail_next(
        Call::List,
        [CloudErrorKind::RateLimited { after: secs(30.0) }],
    );
    d.answer_one(); // n1's create; now the list goes out
    assert_eq!(d.pending.len(), 1, "{:?}", d.pending);
    let sent_before = d.sent.len();
    d.answer_one(); // the list: rate limited for 30 s
    d.advance(secs(29.9));
    let during = &d.sent[sent_before..];
    assert!(during.is_empty(), "calls during the pause: {during:?}");
    d.advance(secs(5.0));
    assert_eq!(d.cloud_routes().len(), 3);
}

/// Kills (cargo-mutants, before the reorganisation): the `!` of `!routes.is_empty()` in
/// `write_condition` deleted. As upstream, a node without pod CIDRs that a cloud route
/// still targets gets its condition written (the route is deleted; the node is not
/// routed), while a node with neither is left alone.
#[test]
fn a_node_without_pod_cidrs_but_with_a_route_gets_its_condition_written() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("a", "n1", "10.0.1.0/24")]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(vec![
        node("n1", &[], "192.168.0.1"),
        node("n2", &[], "192.168.0.2"),
    ]);
    assert!(d.cloud_routes().is_empty(), "{:?}", d.cloud_routes());
    assert_eq!(condition_statuses(&d), vec![("n1", "True")]);
}

// --- shutdown and the lease: the controller decides when the drivers stop -------------

/// Guards the drain: after Shutdown the controller exits once nothing is in flight, not
/// before (break `maybe_exit`'s idle check and the exit comes with the Shutdown).
#[test]
fn shutdown_exits_once_the_calls_in_flight_are_answered() {
    let mut d = Driver::new(watch_config());
    d.list(nodes(2));
    d.answer_one(); // the list; two creates in flight
    assert_eq!(d.pending.len(), 2);
    d.feed(Input::Shutdown);
    assert!(d.exits.is_empty(), "exited with calls in flight");
    d.answer_one();
    assert!(d.exits.is_empty());
    d.answer_one();
    assert_eq!(d.exits, vec![route_controller::Exit::Shutdown]);
    assert_eq!(
        d.ctrl.next_deadline(),
        None,
        "nothing to wake for after the exit"
    );
}

/// Guards that a shutdown waits for writes only: a list in flight (a pass that has
/// not planned yet) does not hold the exit; its answer would feed no pass. With
/// `is_idle` counting every operation in flight, no exit comes.
#[test]
fn a_shutdown_does_not_wait_for_a_list_in_flight() {
    let mut d = Driver::new(watch_config());
    d.list(nodes(2));
    assert!(
        matches!(d.pending.front(), Some((_, CloudOp::List { .. }))),
        "the first pass lists: {:?}",
        d.pending
    );
    d.feed(Input::Shutdown);
    assert_eq!(d.exits, vec![route_controller::Exit::Shutdown]);
}

/// Guards the drain deadline in virtual time: a call that is never answered holds the
/// shutdown for `drain_timeout` and no longer (break the deadline in next_deadline and
/// the controller is never woken to give up).
#[test]
fn shutdown_gives_up_on_unanswered_calls_at_the_drain_deadline() {
    let mut d = Driver::new(watch_config());
    d.list(nodes(1));
    d.answer_one(); // the list; the create stays unanswered
    d.pending.clear();
    let asked = d.now;
    d.feed(Input::Shutdown);
    let deadline = d.ctrl.next_deadline().expect("the drain deadline");
    assert_eq!(deadline - asked, secs(10.0));
    d.now = deadline - secs(0.001);
    d.feed(Input::Tick);
    assert!(d.exits.is_empty(), "gave up early");
    d.now = deadline;
    d.feed(Input::Tick);
    assert_eq!(d.exits, vec![route_controller::Exit::Shutdown]);
}

/// Guards the exit on a lost lease, and that a lease lost during a shutdown's drain
/// ends the drain at once, cleanly (SIGTERM exits 0; nothing in flight can send past
/// the fence): without the `shutting_down` check the second controller would exit
/// with LostLeadership.
#[test]
fn losing_the_lease_exits_except_during_a_shutdown() {
    let mut config = watch_config();
    config.leader_election = true;
    let mut d = Driver::new(config.clone());
    d.start(nodes(1));
    d.feed(Input::Leadership(true));
    d.settle();
    d.feed(Input::Leadership(false));
    assert_eq!(d.exits, vec![route_controller::Exit::LostLeadership]);

    let mut d = Driver::new(config);
    d.start(nodes(1));
    d.feed(Input::Leadership(true));
    d.answer_one(); // the list; the create in flight
    d.feed(Input::Shutdown);
    assert!(d.exits.is_empty(), "the drain waits for the create");
    d.feed(Input::Leadership(false));
    assert_eq!(d.exits, vec![route_controller::Exit::Shutdown]);
    d.settle();
    assert_eq!(d.exits, vec![route_controller::Exit::Shutdown]);
}

/// Guards that condition-write retries are the controller's: a node whose write meets
/// conflicts is tried again 100–200 ms later, by a timer of the controller, while the
/// other nodes' writes were sent at once (treated as a failure, n0's retries would
/// back off for seconds).
#[test]
fn a_busy_condition_write_is_retried_soon_without_holding_back_other_nodes() {
    let mut d = Driver::new(watch_config());
    d.busy_writes.insert("n0".into(), 2);
    d.start(nodes(3));
    let first_round: Vec<&str> = d.condition_writes.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        first_round,
        vec!["n0", "n1", "n2"],
        "every node's write went out at once"
    );
    // Within a second: the failure backoff (½–1 s, then 1–2 s) could not do that.
    d.advance(secs(1.0));
    let n0: Vec<_> = d
        .condition_writes
        .iter()
        .filter(|(n, _)| n == "n0")
        .collect();
    assert_eq!(n0.len(), 3, "two busy answers, then written");
    assert_eq!(d.conditions["n0"].status, "False");
}

/// The burst of creates of Hetzner's rate-limit test, now in virtual time and in the
/// controller, where the budget is spent: 40 creates against a cloud that refuses
/// beyond 20 requests/s with a bucket of 10 finish with zero refusals, at the pace the
/// declared budget allows (one token and 2 % of the rate below the limit; at 40
/// creates that margin costs 5 %, so within 10 % of the limit's minimum). Guards the pacing against the provider's real
/// limit (without the controller's budget, the burst gets 429s).
#[test]
fn a_burst_of_creates_stays_under_the_api_rate_limit_and_finishes_near_the_minimum_time() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;
    const BURST: u32 = 10;
    const RATE: f64 = 20.0;
    const CREATES: usize = 40;
    let t0 = Instant::now();
    let clock = Arc::new(AtomicU64::new(0));
    let reader = clock.clone();
    let cloud = Arc::new(FakeCloud::with_clock(Box::new(move || {
        t0 + Duration::from_nanos(reader.load(Ordering::Relaxed))
    })));
    cloud.set_rate_limit(RATE, BURST);
    let mut config = watch_config();
    config.budget = route_controller::Routes::budget(cloud.as_ref());
    assert!(
        config.budget.is_some(),
        "a rate-limited cloud declares its budget"
    );
    let metrics = Arc::new(route_controller::Metrics::new());
    let mut c = route_controller::Controller::new(config, metrics.clone());
    let mut now = t0;
    let mut commands = c.handle(Input::Node(NodeEvent::Init), now);
    for n in nodes(CREATES) {
        commands.extend(c.handle(Input::Node(NodeEvent::InitApply(n)), now));
    }
    commands.extend(c.handle(Input::Node(NodeEvent::InitDone), now));
    let mut last_create = now;
    for _ in 0..10_000 {
        let mut replies = Vec::new();
        for command in commands.drain(..) {
            if let Command::Cloud { id, op, .. } = command {
                if matches!(op, CloudOp::Create { .. }) {
                    last_create = now;
                }
                let reply = route_controller::run_op(cloud.as_ref(), "kubernetes", &op, &metrics);
                replies.push(Input::Cloud { id, reply });
            }
        }
        for r in replies {
            commands.extend(c.handle(r, now));
        }
        if commands.is_empty() {
            match c.next_deadline() {
                Some(d) if d < t0 + secs(60.0) => {
                    now = d.max(now);
                    clock.store((now - t0).as_nanos() as u64, Ordering::Relaxed);
                    commands = c.handle(Input::Tick, now);
                }
                _ => break,
            }
        }
    }
    let refused = cloud.counters().rate_limited.load(Ordering::Relaxed);
    assert_eq!(refused, 0, "the cloud refused requests for its rate limit");
    assert_eq!(cloud.routes().len(), CREATES);
    // The list and the creates, one request each; the first BURST go at once.
    let minimum = secs((CREATES + 1 - BURST as usize) as f64 / RATE);
    let took = last_create - t0;
    eprintln!(
        "burst: {CREATES} creates in {took:.2?} of virtual time; the limit allows {minimum:.2?}"
    );
    assert!(
        took <= minimum.mul_f64(1.10),
        "took {took:?}, the limit allows {minimum:?}"
    );
    assert!(
        took >= minimum,
        "took {took:?}, faster than the limit allows?"
    );
    let declared = secs((CREATES + 1 - (BURST as usize - 1)) as f64 / (RATE * 0.98));
    assert!(
        took <= declared.mul_f64(1.01),
        "took {took:?}, the budget allows {declared:?}"
    );
}

// --- found by mutation testing (tests/README.md, "Mutation testing") -----------------

fn creates_to(d: &Driver, cidr: &str) -> usize {
    d.sent
        .iter()
        .filter(|(_, op)| op_kind(op) == "create" && destination(op) == cidr)
        .count()
}

/// Kills: `Retries::route_done` emptied. A route that failed and then went through is
/// no longer counted as failing (`route_controller_routes{state="failing"}`), and it
/// counts as ok.
#[test]
fn a_route_that_goes_through_after_failing_no_longer_counts_as_failing() {
    let mut d = Driver::new(watch_config());
    let cidr = Cidr::parse("10.0.0.0/24").unwrap();
    d.cloud
        .break_destination(cidr, CloudErrorKind::Retry { after: None });
    d.start(nodes(1));
    assert_eq!(d.metrics.routes_failing.get(), 1);
    assert_eq!(d.metrics.routes_ok.get(), 0);
    d.cloud.heal_destination(cidr);
    d.advance(secs(2.0));
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.0.0/24".into())]);
    assert_eq!(d.metrics.routes_failing.get(), 0);
    assert_eq!(d.metrics.routes_ok.get(), 1);
}

/// Kills: `Retries::backing_off` made false. A pass for another node during a route's
/// backoff leaves that route alone: it is tried again at its retry time (at least ½ s
/// after the failure), not by whatever pass comes first.
#[test]
fn a_route_backing_off_is_not_retried_early_by_a_pass_for_another_node() {
    let mut d = Driver::new(watch_config());
    d.cloud.break_destination(
        Cidr::parse("10.0.0.0/24").unwrap(),
        CloudErrorKind::Retry { after: None },
    );
    d.start(nodes(1));
    assert_eq!(creates_to(&d, "10.0.0.0/24"), 1);
    d.advance(secs(0.1));
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.advance(secs(0.2));
    assert_eq!(creates_to(&d, "10.0.1.0/24"), 1, "n1's pass ran");
    assert_eq!(creates_to(&d, "10.0.0.0/24"), 1, "{:?}", d.sent);
    d.advance(secs(1.0));
    assert_eq!(
        creates_to(&d, "10.0.0.0/24"),
        2,
        "the retry came at its time"
    );
}

/// Kills: `OpKind::node` returning another name. A node's creates in flight hold back
/// its condition: of a node's two creates in flight, the first answer writes nothing;
/// the second writes the one condition, `False`.
#[test]
fn a_nodes_condition_waits_for_all_of_its_creates_in_flight() {
    let mut d = Driver::new(watch_config());
    d.list(vec![node(
        "n0",
        &["10.0.0.0/24", "10.0.1.0/24"],
        "192.168.0.1",
    )]);
    assert!(d.answer_one(), "the startup pass's list");
    assert_eq!(
        d.pending.len(),
        2,
        "both creates in flight: {:?}",
        d.pending
    );
    assert!(d.answer_one());
    assert!(d.condition_writes.is_empty(), "{:?}", d.condition_writes);
    assert!(d.answer_one());
    assert_eq!(condition_statuses(&d), vec![("n0", "False")]);
}

/// Kills: `Retries::keep_wanted` emptied. When the node of a failing route goes away,
/// the route's retry goes with it: no retry pass, and it no longer counts as failing.
#[test]
fn the_retry_of_a_route_whose_node_is_deleted_is_dropped() {
    let mut d = Driver::new(watch_config());
    d.cloud.break_destination(
        Cidr::parse("10.0.0.0/24").unwrap(),
        CloudErrorKind::Retry { after: None },
    );
    d.start(nodes(2));
    assert_eq!(d.metrics.routes_failing.get(), 1);
    d.advance(secs(0.1));
    d.node_event(NodeEvent::Deleted(nodes(1).remove(0)));
    d.advance(secs(600.0));
    assert_eq!(creates_to(&d, "10.0.0.0/24"), 1);
    assert_eq!(d.metrics.passes(TriggerKind::Retry), 0);
    assert_eq!(d.metrics.routes_failing.get(), 0);
}

/// Kills: `Operations::is_idle` made true, or its `&&` made `||`. Age alone does not
/// make a pass list while operations run: their replies keep the view current, and a
/// list would wait for all of them. A new node's pass past the view's max age plans at
/// once, without a list, both with operations in flight only and with some queued.
#[test]
fn an_aged_view_is_not_relisted_while_operations_run() {
    for max_in_flight in [16, 1] {
        let mut config = watch_config();
        config.max_in_flight = max_in_flight;
        let max_age = config.route_view_max_age;
        let mut d = Driver::new(config);
        d.list(nodes(3));
        assert!(d.answer_one(), "the startup pass's list");
        assert_eq!(d.pending.len(), max_in_flight.min(3), "creates in flight");
        d.now += max_age + secs(1.0);
        d.node_event(NodeEvent::Added(node(
            "n9",
            &["10.0.9.0/24"],
            "192.168.0.9",
        )));
        assert_eq!(
            creates_to(&d, "10.0.9.0/24"),
            usize::from(max_in_flight > 3)
        );
        d.settle();
        assert_eq!(d.count("list"), 1, "{:?}", d.sent);
        assert_eq!(creates_to(&d, "10.0.9.0/24"), 1);
        assert_eq!(d.cloud_routes().len(), 4);
    }
}

/// Kills: `Retries::list_done` emptied. A list that goes through resets the list's
/// backoff: after three failures and a success, the next failed list is retried
/// within [½, 1] s again, not after the fourth step's [4, 8] s.
#[test]
fn a_list_that_goes_through_resets_the_list_backoff() {
    let mut d = Driver::new(watch_config());
    let timeout = CloudErrorKind::Ambiguous;
    d.cloud.fail_next(Call::List, [timeout, timeout, timeout]);
    d.start(nodes(1));
    d.advance(secs(30.0));
    assert_eq!(d.count("list"), 4);
    // Past the view's max age, the next change lists first; that list fails once.
    d.advance(secs(300.0));
    d.cloud.fail_next(Call::List, [timeout]);
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.advance(secs(30.0));
    let gaps = gaps(&list_times(&d));
    assert_eq!(gaps.len(), 5, "{gaps:?}");
    assert!((0.5..=1.0).contains(&gaps[4]), "{gaps:?}");
    assert_eq!(d.cloud_routes().len(), 2);
}

/// The pass report is the one log line per pass an operator reads: pinned exactly, for
/// a pass that changed routes (and listed), one whose list failed, and a cause with
/// more triggers than it samples. Kills the mutants of `PassReport`'s and `Cause`'s
/// `Display` (emptied, the `", "` separator's `i > 0`, the `and N more` count).
#[test]
fn pass_reports_read_as_one_exact_line() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    assert_eq!(
        d.reports[0].to_string(),
        "pass 1 (watch) caused by startup, node n0 added, node n1 added: routes created 2, \
         deleted 0, kept 0, failed 0, deferred 0; conditions written 2; 3 cloud calls \
         (listed); took 0s"
    );
    d.advance(secs(1.0));
    for n in nodes(12).into_iter().skip(2) {
        d.node_event(NodeEvent::Added(n));
    }
    d.advance(secs(2.0));
    let batch = d.reports.last().unwrap().to_string();
    assert!(
        batch.starts_with(
            "pass 3 (watch) caused by node n3 added, node n4 added, node n5 added, node n6 \
             added, node n7 added, node n8 added, node n9 added, node n10 added and 1 more: \
             routes created 9"
        ),
        "{batch}"
    );
    let mut relist = Driver::new(watch_config());
    relist
        .cloud
        .fail_next(Call::List, [CloudErrorKind::Ambiguous]);
    relist.start(nodes(1));
    assert_eq!(
        relist.reports[0].to_string(),
        "pass 1 (watch) caused by startup, node n0 added: listing routes failed: fake cloud: \
         injected timeout; the call may have taken effect; 1 cloud calls"
    );
}

/// Kills: `Operations::supersede` returning nothing. A new plan drops the queued
/// operations it no longer wants: a queued delete of a stale route is dropped when
/// its node comes back, so the route is never deleted (and recreated).
#[test]
fn a_queued_delete_the_next_plan_no_longer_wants_is_never_sent() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("a", "old5", "10.0.5.0/24"),
        route("b", "old6", "10.0.6.0/24"),
    ]);
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::with_cloud(config, cloud);
    d.list(vec![]);
    assert!(d.answer_one(), "the startup pass's list");
    assert_eq!(
        d.sent
            .iter()
            .map(|(_, op)| destination(op))
            .collect::<Vec<_>>(),
        ["list", "10.0.5.0/24"]
    );
    d.node_event(NodeEvent::Added(node(
        "old6",
        &["10.0.6.0/24"],
        "192.168.0.6",
    )));
    d.settle();
    d.advance(secs(60.0));
    assert_eq!(d.count("delete"), 1, "{:?}", d.sent);
    assert_eq!(
        d.cloud_routes(),
        vec![("old6".into(), "10.0.6.0/24".into())]
    );
}

/// Kills: `||` made `&&` in `Operations::supersede`. Queued operations the new plan
/// repeats stay queued for the pass that planned them: with one create in flight and
/// two queued, a new node's pass adds only its own create, and each pass reports what
/// it made.
#[test]
fn operations_a_new_plan_repeats_stay_with_the_pass_that_queued_them() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(3));
    assert!(d.answer_one(), "the startup pass's list");
    d.node_event(NodeEvent::Added(node(
        "n3",
        &["10.0.3.0/24"],
        "192.168.0.3",
    )));
    d.settle();
    let made: Vec<(u64, usize, usize)> = d
        .reports
        .iter()
        .map(|r| (r.cause.pass, r.created, r.deferred))
        .collect();
    assert_eq!(made, vec![(1, 3, 0), (2, 1, 0)]);
}

/// Kills: the `-` of `count_create(.., -1)` in `Operations::retain_queued` deleted. A
/// node's queued create cancelled by a relist no longer holds back its condition: the
/// create planned after the relist writes it.
#[test]
fn a_create_cancelled_by_a_relist_does_not_hold_back_the_nodes_condition() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(2));
    assert!(d.answer_one(), "the startup pass's list");
    // n0's create in flight, n1's queued; a relist cancels n1's.
    d.list(nodes(2));
    d.settle();
    d.advance(secs(60.0));
    assert_eq!(d.cloud_routes().len(), 2);
    assert_eq!(
        d.conditions.get("n1").map(|c| c.status.as_ref()),
        Some("False"),
        "{:?}",
        d.condition_writes
    );
}

/// Kills: `Known::is_routable` made true. A retried condition write recomputes the
/// planner's verdict: a node without pod CIDRs whose stale route cannot be deleted
/// stays `True` (NoRouteCreated) when its busy write is tried again.
#[test]
fn a_retried_condition_write_keeps_the_planners_verdict() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("a", "n1", "10.0.1.0/24")]);
    cloud.break_destination(
        Cidr::parse("10.0.1.0/24").unwrap(),
        CloudErrorKind::Retry { after: None },
    );
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.busy_writes.insert("n1".into(), 1);
    d.start(vec![node("n1", &[], "192.168.0.1")]);
    d.advance(secs(1.0));
    assert_eq!(condition_statuses(&d), vec![("n1", "True"), ("n1", "True")]);
}

/// Kills: `NodeView::nodes` returning nothing. The list carries the node directory
/// (how a provider maps its routes' targets back to nodes), and the controller shows
/// the nodes it knows.
#[test]
fn the_list_carries_every_node_by_provider_id() {
    let mut d = Driver::new(watch_config());
    let mut n0 = node("n0", &["10.0.0.0/24"], "192.168.0.0");
    n0.provider_id = Some("fake://i-0".into());
    d.start(vec![n0, node("n1", &["10.0.1.0/24"], "192.168.0.1")]);
    let directory = d
        .sent
        .iter()
        .find_map(|(_, op)| match op {
            CloudOp::List { nodes } => Some(nodes.clone()),
            _ => None,
        })
        .expect("a list");
    assert_eq!(directory.node_by_provider_id("fake://i-0"), Some("n0"));
    assert_eq!(directory.len(), 2);
    let known: Vec<String> = d.ctrl.nodes().map(|n| n.name).collect();
    assert_eq!(known, ["n0", "n1"]);
}

/// Kills: `NodeView::names` returning nothing. In upstream's watch mode the informer
/// resync re-delivers every node, and each enqueues a pass of its own.
#[test]
fn upstream_watch_mode_resync_enqueues_every_node() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    d.start(nodes(2));
    d.advance(secs(20.0));
    let before = d.reports.len();
    let period = d.ctrl.resync_period();
    d.advance(period);
    let causes: Vec<String> = d.reports[before..]
        .iter()
        .map(|r| r.cause.to_string())
        .collect();
    assert_eq!(causes, ["node n0 resynced", "node n1 resynced"]);
}

/// Kills: `NodeView::wanted_routes` returning 1. The route gauges count every node's
/// routes: three nodes routed are three routes ok.
#[test]
fn the_route_gauges_count_every_nodes_routes() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(3));
    assert_eq!(d.metrics.routes_ok.get(), 3);
    assert_eq!(d.metrics.routes_pending.get(), 0);
    assert_eq!(d.metrics.routes_failing.get(), 0);
}

/// Kills: `NodeView::note_cidrs` emptied, `NodeView::route_created` returning None or
/// zero, and `!=` made `==` in `NodeView::delete` (which then forgets every other node's
/// pending latency). Node-to-route latency is observed once per route created, also
/// for a node whose neighbour left while its create was in flight.
#[test]
fn node_to_route_latency_is_observed_once_per_route() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    assert_eq!(d.metrics.node_to_route.count(), 2);
    d.advance(secs(10.0));
    let n2 = node("n2", &["10.0.2.0/24"], "192.168.0.2");
    let n3 = node("n3", &["10.0.3.0/24"], "192.168.0.3");
    d.node_event(NodeEvent::Added(n2));
    d.node_event(NodeEvent::Added(n3.clone()));
    d.node_event(NodeEvent::Deleted(n3));
    assert_eq!(creates_to(&d, "10.0.2.0/24"), 1, "sent at once");
    // Answered half a second later: the one latency that is not zero.
    d.now += secs(0.5);
    d.settle();
    d.advance(secs(10.0));
    assert_eq!(d.metrics.node_to_route.count(), 3);
    let exposition = d.metrics.encode();
    assert!(
        exposition.contains("route_controller_node_to_route_seconds_sum 0.5\n"),
        "{exposition}"
    );
}

/// Kills: `NodeView::route_planned` emptied. A route lost behind the controller's
/// back (made a blackhole) and re-created by the next poll is observed, from the plan
/// that found it missing, though no node event started a clock for it.
#[test]
fn node_to_route_latency_is_observed_for_a_lost_route_repaired() {
    let mut d = Driver::new(poll_config());
    d.start(nodes(2));
    d.advance(secs(10.0));
    assert_eq!(d.metrics.node_to_route.count(), 2);
    d.cloud.make_blackhole(Cidr::parse("10.0.1.0/24").unwrap());
    d.advance(secs(10.0));
    assert_eq!(d.count("create"), 3, "{:?}", sent_ops(&d));
    assert_eq!(d.metrics.node_to_route.count(), 3);
}

/// Kills: the `==`s and the `&&` of `NodeView::complete_list`'s upstream rule. A relist
/// of unchanged nodes is, in our watch mode, one pass caused by the relist alone; in
/// upstream's, each unchanged node enqueues as a resync update.
#[test]
fn a_relist_of_unchanged_nodes_is_one_relist_pass_or_upstreams_resync_updates() {
    for (mode, expected) in [
        (Mode::Watch, vec!["node relist"]),
        (
            Mode::UpstreamWatch,
            vec!["node n0 resynced", "node n1 resynced"],
        ),
    ] {
        let mut config = watch_config();
        config.mode = mode;
        let mut d = Driver::new(config);
        d.start(nodes(2));
        d.advance(secs(20.0));
        let before = d.reports.len();
        d.list(nodes(2));
        d.advance(secs(20.0));
        let causes: Vec<String> = d.reports[before..]
            .iter()
            .map(|r| r.cause.to_string())
            .collect();
        assert_eq!(causes, expected, "{mode:?}");
    }
}

/// Kills: `Operations::remove_queued_create` returning None, or not uncounting. When the delete of a route
/// being replaced fails, the create queued behind it is not sent (the old route is
/// still there, so it would fail too): it waits for the delete's retry.
#[test]
fn a_failed_delete_holds_back_the_create_that_replaces_it() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("a", "old", "10.0.0.0/24")]);
    cloud.fail_next(Call::Delete, [CloudErrorKind::Retry { after: None }]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(1));
    let kinds = |d: &Driver| d.sent.iter().map(|(_, op)| op_kind(op)).collect::<Vec<_>>();
    assert_eq!(kinds(&d), ["list", "delete"]);
    d.advance(secs(5.0));
    assert_eq!(kinds(&d), ["list", "delete", "delete", "create"]);
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.0.0/24".into())]);
    // The create held back no longer counts for the node: its condition is written
    // (kills the `-` of `count_create(.., -1)` in `remove_queued_create` deleted).
    assert_eq!(
        d.conditions.get("n0").map(|c| c.status.as_ref()),
        Some("False")
    );
}

/// Kills: `&&` made `||` in `Operations::remove_queued_create`. A failed delete holds
/// back only the create for its own destination: another node's create queued ahead of
/// it goes out at once.
#[test]
fn a_failed_delete_holds_back_only_its_own_destinations_create() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("a", "old", "10.0.1.0/24")]);
    cloud.fail_next(Call::Delete, [CloudErrorKind::Retry { after: None }]);
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::with_cloud(config, cloud);
    d.list(nodes(2));
    assert!(d.answer_one(), "the startup pass's list");
    assert!(d.answer_one(), "the failing delete");
    assert_eq!(
        sent_ops(&d),
        ["list list", "delete 10.0.1.0/24", "create 10.0.0.0/24"]
    );
    d.advance(secs(5.0));
    assert_eq!(d.cloud_routes().len(), 2);
}

/// Kills: `NodeView::all_routed` emptied. A node whose routes all exist no longer
/// counts towards node-to-route latency: if its route is replaced a day later, the
/// wait counts from the plan that found it missing, not from the node's start.
#[test]
fn a_node_whose_routes_exist_adds_no_latency_when_one_is_replaced_later() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("a", "n0", "10.0.0.0/24")]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(1));
    assert_eq!(d.count("create"), 0);
    d.cloud.make_blackhole(Cidr::parse("10.0.0.0/24").unwrap());
    d.advance(Duration::from_secs(25 * 3600));
    assert_eq!(d.count("create"), 1, "the resync replaced the blackhole");
    assert_eq!(d.metrics.node_to_route.count(), 1);
    let exposition = d.metrics.encode();
    assert!(
        exposition.contains("route_controller_node_to_route_seconds_sum 0\n"),
        "{exposition}"
    );
}

/// Kills: `Conditions::in_flight` returning None. A condition write in flight counts
/// as the node's current condition: a pass that starts while a busy write's retry is
/// in flight writes nothing more for that node.
#[test]
fn a_condition_write_in_flight_is_not_sent_twice() {
    let mut d = Driver::new(watch_config());
    d.busy_writes.insert("n0".into(), 1);
    d.start(nodes(1));
    assert_eq!(d.condition_writes.len(), 1, "busy");
    // At the retry's instant a new node starts a pass: the retry goes out first.
    d.now = d.ctrl.next_deadline().expect("the retry of the write");
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.settle();
    let n0: Vec<&str> = d
        .condition_writes
        .iter()
        .filter(|(n, _)| n == "n0")
        .map(|(_, c)| c.status.as_ref())
        .collect();
    assert_eq!(n0, ["False", "False"]);
}

/// Kills: `Conditions::is_idle` made true. A condition write in flight keeps the
/// controller from being idle, so a shutdown waits for its answer before it exits.
#[test]
fn a_shutdown_waits_for_a_condition_write_in_flight() {
    let mut d = Driver::new(watch_config());
    d.list(nodes(1));
    assert!(d.answer_one(), "the startup pass's list");
    // Answer the create by hand, leaving the condition write it causes unanswered.
    let (id, op) = d.pending.pop_front().expect("the create");
    let reply = route_controller::run_op(d.cloud.as_ref(), "kubernetes", &op, &d.metrics);
    let commands = d.ctrl.handle(Input::Cloud { id, reply }, d.now);
    assert!(
        commands
            .iter()
            .any(|c| matches!(c, Command::WriteCondition { .. })),
        "{commands:?}"
    );
    assert!(!d.ctrl.is_idle());
    let commands = d.ctrl.handle(Input::Shutdown, d.now);
    assert!(
        !commands.iter().any(|c| matches!(c, Command::Exit(_))),
        "{commands:?}"
    );
    d.feed(Input::ConditionWritten {
        node: "n0".into(),
        result: Ok(()),
    });
    assert_eq!(d.exits, [route_controller::Exit::Shutdown]);
}

/// Kills: the `==` and `!=` of `change_trigger`'s upstream rule. Upstream's watch mode
/// names what an update changed: an unchanged resourceVersion is a resync, then pod
/// CIDRs before addresses.
#[test]
fn upstream_watch_mode_names_what_an_update_changed() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    let n0 = nodes(1).remove(0);
    d.start(vec![n0.clone()]);
    d.advance(secs(20.0));
    let before = d.reports.len();
    let mut cidrs = bumped(n0.clone(), 2);
    cidrs.pod_cidrs = vec!["10.0.9.0/24".into()];
    let mut addresses = bumped(cidrs.clone(), 3);
    addresses.addresses = vec![route_controller::model::NodeAddress::internal_ip(
        "192.168.9.9",
    )];
    for update in [cidrs, addresses.clone(), addresses] {
        d.node_event(NodeEvent::Modified(update));
        d.advance(secs(20.0));
    }
    let causes: Vec<String> = d.reports[before..]
        .iter()
        .map(|r| r.cause.to_string())
        .collect();
    assert_eq!(
        causes,
        [
            "node n0 pod CIDRs changed",
            "node n0 addresses changed",
            "node n0 resynced"
        ]
    );
}

/// Kills: the heartbeat shortcut of `Nodes::apply` taken for an unchanged
/// resourceVersion in upstream's mode. A node repeated exactly as the controller holds
/// it (its condition as written) is, upstream, a resync that runs a pass; only a new
/// resourceVersion with nothing else changed is a heartbeat.
#[test]
fn upstream_watch_mode_resyncs_a_node_repeated_as_held() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    let mut n0 = nodes(1).remove(0);
    d.start(vec![n0.clone()]);
    d.advance(secs(20.0));
    n0.network_unavailable = d.conditions.get("n0").cloned();
    assert!(
        n0.network_unavailable.is_some(),
        "the condition was written"
    );
    let before = d.reports.len();
    for update in [n0.clone(), bumped(n0, 7)] {
        d.node_event(NodeEvent::Modified(update));
        d.advance(secs(20.0));
    }
    let causes: Vec<String> = d.reports[before..]
        .iter()
        .map(|r| r.cause.to_string())
        .collect();
    assert_eq!(causes, ["node n0 resynced"]);
}

/// Kills: the `!` of `!o.resource_version.is_empty()` in `change_trigger` deleted. In
/// our watch mode an update with an unchanged resourceVersion is ignored (the resync
/// is our own timer), but only if there is one: without a resourceVersion the content
/// decides.
#[test]
fn an_update_with_an_unchanged_resource_version_is_ignored_unless_it_has_none() {
    for (rv, passes) in [("1", 0), ("", 1)] {
        let mut d = Driver::new(watch_config());
        let mut n0 = nodes(1).remove(0);
        n0.resource_version = rv.into();
        d.start(vec![n0.clone()]);
        d.advance(secs(20.0));
        let before = d.reports.len();
        n0.pod_cidrs = vec!["10.0.9.0/24".into()];
        d.node_event(NodeEvent::Modified(n0));
        d.advance(secs(20.0));
        assert_eq!(d.reports.len() - before, passes, "resourceVersion {rv:?}");
    }
}

/// Kills: `Conditions::forget` emptied. A deleted node's write backoff goes with it:
/// a node of that name that comes back starts its backoff afresh ([½, 1] s to its
/// second write), with no retry left over from before.
#[test]
fn a_node_that_comes_back_starts_its_condition_backoff_afresh() {
    let mut d = Driver::new(watch_config());
    d.condition_failure = Some("403 Forbidden".into());
    let n0 = nodes(1).remove(0);
    d.start(vec![n0.clone()]);
    d.advance(secs(20.0));
    assert!(
        d.condition_writes.len() >= 5,
        "{}",
        d.condition_writes.len()
    );
    d.node_event(NodeEvent::Deleted(n0.clone()));
    d.advance(secs(1.0));
    let before = d.condition_writes.len();
    let back = d.now;
    let mut writes = Vec::new();
    d.node_event(NodeEvent::Added(bumped(n0, 5)));
    d.settle();
    assert_eq!(
        d.condition_writes.len() - before,
        1,
        "once its route is back"
    );
    while d.now < back + secs(10.0) {
        let next = d.ctrl.next_deadline().expect("a retry");
        d.now = next;
        d.feed(Input::Tick);
        d.settle();
        if d.condition_writes.len() > before + writes.len() {
            writes.push((d.now - back).as_secs_f64());
        }
    }
    assert_eq!(
        d.condition_writes.len() - before,
        writes.len() + 1,
        "{writes:?}"
    );
    assert!((0.5..=1.0).contains(&writes[0]), "{writes:?}");
}

/// Kills: `Passes::none_open` made true. Upstream's modes run one pass at a time, each
/// until its operations are answered: a change while a create is in flight waits for
/// it, then gets its pass.
#[test]
fn upstream_watch_mode_starts_no_pass_while_one_is_open() {
    let mut config = watch_config();
    config.mode = Mode::UpstreamWatch;
    let mut d = Driver::new(config);
    d.list(nodes(1));
    assert!(d.answer_one(), "the first pass's list");
    assert_eq!(d.pending.len(), 1, "its create in flight");
    d.now += secs(60.0);
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.feed(Input::Tick);
    assert_eq!(d.passes(), 1, "{:?}", d.sent);
    assert_eq!(d.count("list"), 1);
    d.advance(secs(60.0));
    assert_eq!(d.passes(), 2);
    assert_eq!(d.cloud_routes().len(), 2);
}

/// Kills: `Passes::latest_cause` returning a default cause. A condition write carries
/// the cause of the pass that wrote it, as every command does.
#[test]
fn a_condition_write_carries_the_cause_of_its_pass() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(1));
    let causes: Vec<String> = d
        .commands
        .iter()
        .filter_map(|c| match c {
            Command::WriteCondition { cause, .. } => Some(format!("{}: {cause}", cause.pass)),
            _ => None,
        })
        .collect();
    assert_eq!(causes, ["1: startup, node n0 added"]);
}

/// Kills: the guard `attempts < BUSY_ATTEMPTS` of `on_condition_written` made true or
/// `<=`. A busy write is retried 100–200 ms later four times (five attempts in all),
/// then with the backoff of a failing one: [½, 1] s, then [1, 2] s.
#[test]
fn a_busy_condition_write_gets_five_quick_attempts_then_backs_off() {
    let mut d = Driver::new(watch_config());
    d.busy_writes.insert("n0".into(), 6);
    d.start(nodes(1));
    let t0 = d.now;
    let mut times = vec![0.0];
    while d.condition_writes.len() < 7 {
        d.now = d.ctrl.next_deadline().expect("a retry");
        d.feed(Input::Tick);
        d.settle();
        if d.condition_writes.len() > times.len() {
            times.push((d.now - t0).as_secs_f64());
        }
    }
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    for gap in &gaps[..4] {
        assert!((0.1..=0.2).contains(gap), "{gaps:?}");
    }
    assert!((0.5..=1.0).contains(&gaps[4]), "{gaps:?}");
    assert!((1.0..=2.0).contains(&gaps[5]), "{gaps:?}");
}

/// Kills: `RouteView::remove` emptied, or either `==` of its match made `!=`. A deleted
/// route leaves the controller's view at once: the next pass, planning from that view
/// without a list, does not delete it again.
/// Kills the two open mutants of `RouteView::remove` (src/controller/view.rs), which
/// need a node with two routes of which one is deleted: its `&&` made `||` (the first
/// route to the same node leaves the view instead of the deleted one) and the `==` of
/// the node's destination list made `!=` (the kept destination leaves `routes_to`).
/// Either way the next pass, planned from the view without a list, would create the
/// kept route again.
#[test]
fn deleting_one_of_a_nodes_two_routes_keeps_the_other_in_the_view() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("kept", "n0", "10.0.1.0/24"),
        route("gone", "n0", "10.0.2.0/24"),
    ]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(vec![node(
        "n0",
        &["10.0.1.0/24", "10.0.2.0/24"],
        "192.168.0.1",
    )]);
    d.advance(secs(10.0));
    // n0 loses a pod CIDR; the next pass (a node joins) deletes that route, and the
    // one after (another node joins) must still see n0's other route.
    d.node_event(NodeEvent::Modified(node(
        "n0",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    for (i, name) in ["n1", "n2"].iter().enumerate() {
        let cidr = format!("10.0.{}.0/24", i + 3);
        let ip = format!("192.168.0.{}", i + 2);
        d.node_event(NodeEvent::Added(node(name, &[cidr.as_str()], &ip)));
        d.advance(secs(10.0));
    }
    assert_eq!(
        sent_ops(&d),
        [
            "list list",
            "delete 10.0.2.0/24",
            "create 10.0.3.0/24",
            "create 10.0.4.0/24"
        ]
    );
}

#[test]
fn a_deleted_route_leaves_the_view_so_no_pass_deletes_it_twice() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("a", "n0", "10.0.0.0/24"),
        route("b", "old", "10.0.5.0/24"),
    ]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(1));
    d.advance(secs(10.0));
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.advance(secs(10.0));
    assert_eq!(
        sent_ops(&d),
        ["list list", "delete 10.0.5.0/24", "create 10.0.1.0/24"]
    );
}

// --- mutation testing of the rest of src/controller/mod.rs (issue 16) -----------------
// Each test names the mutants of `src/controller/mod.rs` it kills (tests/README.md, "Mutation
// testing").

/// Kills: `Controller::is_synced` made true or false. The drivers read it: synced from
/// a complete list's InitDone until the next Init (a relist).
#[test]
fn the_controller_is_synced_from_a_complete_list_until_a_relist_starts() {
    let mut d = Driver::new(watch_config());
    assert!(!d.ctrl.is_synced(), "before any list");
    d.node_event(NodeEvent::Init);
    d.node_event(NodeEvent::InitApply(nodes(1).remove(0)));
    assert!(!d.ctrl.is_synced(), "during the first list");
    d.node_event(NodeEvent::InitDone);
    assert!(d.ctrl.is_synced(), "after InitDone");
    d.node_event(NodeEvent::Init);
    assert!(!d.ctrl.is_synced(), "during a relist");
}

/// Kills: `Controller::is_leading` made true or false. The actor reads it to tell a
/// fenced call from a lost lease: without leader election the replica leads from the
/// start; with it, from the gain of the lease until its loss.
#[test]
fn the_controller_leads_without_election_or_while_it_holds_the_lease() {
    let d = Driver::new(watch_config());
    assert!(d.ctrl.is_leading(), "without leader election");
    let mut config = watch_config();
    config.leader_election = true;
    let mut d = Driver::new(config);
    assert!(!d.ctrl.is_leading(), "before the lease is won");
    d.feed(Input::Leadership(true));
    assert!(d.ctrl.is_leading(), "holding the lease");
    d.feed(Input::Leadership(false));
    assert!(!d.ctrl.is_leading(), "after the loss");
}

/// Kills: `Controller::routes` returning None, an empty list or one default route. It
/// is the cloud's routes as last listed, kept current by the replies: none before the
/// first list, then exactly what the cloud holds.
#[test]
fn the_controllers_routes_are_none_before_the_first_list_then_the_clouds() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("old", "gone", "10.0.5.0/24")]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    assert!(d.ctrl.routes().is_none(), "before the first list");
    d.start(nodes(2));
    let mut seen: Vec<(String, String)> = d
        .ctrl
        .routes()
        .expect("listed")
        .iter()
        .map(|r| (r.target_node.clone(), r.destination_cidr.clone()))
        .collect();
    seen.sort();
    assert_eq!(seen, d.cloud_routes());
    assert_eq!(seen.len(), 2, "{seen:?}");
}

/// Kills: `Controller::metrics` returning a new registry. It is the registry the
/// controller was built with and records into, which the metrics endpoint serves.
#[test]
fn the_controllers_metrics_are_the_registry_it_records_into() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(1));
    assert!(Arc::ptr_eq(d.ctrl.metrics(), &d.metrics));
    assert_eq!(d.ctrl.metrics().passes_total(), 1);
}

/// Each finished pass as `(pass, created, deleted, failed, deferred)`, in the order
/// the reports came.
fn tallies(d: &Driver) -> Vec<(u64, usize, usize, usize, usize)> {
    d.reports
        .iter()
        .map(|r| (r.cause.pass, r.created, r.deleted, r.failed, r.deferred))
        .collect()
}

/// Kills: `r.deferred += 1` made `*=` (or `-=`) for the queued operations a new plan
/// supersedes in `plan_and_queue`. A queued delete the next plan no longer wants counts
/// as deferred in the report of the pass that queued it.
#[test]
fn a_queued_operation_a_new_plan_drops_counts_as_deferred_in_its_pass() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([
        route("a", "old5", "10.0.5.0/24"),
        route("b", "old6", "10.0.6.0/24"),
    ]);
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::with_cloud(config, cloud);
    d.list(vec![]);
    assert!(d.answer_one(), "the startup pass's list");
    // 10.0.5.0/24's delete in flight, 10.0.6.0/24's queued; old6 comes back.
    d.node_event(NodeEvent::Added(node(
        "old6",
        &["10.0.6.0/24"],
        "192.168.0.6",
    )));
    d.settle();
    d.advance(secs(60.0));
    assert_eq!(tallies(&d), [(2, 0, 0, 0, 0), (1, 0, 1, 0, 1)]);
}

/// Kills: the deferred count of a busy destination in `plan_and_queue` (`deferred += 1`
/// made `*=` or `-=`), and `r.deferred += deferred` made `*=` or `-=`. A pass whose
/// create waits for a delete in flight on the same destination reports it deferred.
#[test]
fn a_create_waiting_for_a_delete_in_flight_counts_as_deferred() {
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    d.now += secs(5.0);
    d.node_event(NodeEvent::Deleted(nodes(1).remove(0)));
    assert_eq!(d.pending.len(), 1, "n0's delete in flight: {:?}", d.pending);
    d.now += secs(5.0);
    d.node_event(NodeEvent::Added(node(
        "n9",
        &["10.0.0.0/24"],
        "192.168.0.9",
    )));
    d.feed(Input::Tick);
    d.settle();
    d.advance(secs(60.0));
    assert_eq!(
        tallies(&d),
        [
            (1, 2, 0, 0, 0),
            (3, 0, 0, 0, 1),
            (2, 0, 1, 0, 0),
            (4, 1, 0, 0, 0)
        ]
    );
}

/// Kills: the deferred count of a route backing off in `plan_and_queue` (`deferred += 1`
/// made `*=` or `-=`). A pass for another node during a route's backoff reports that
/// route deferred.
#[test]
fn a_route_backing_off_counts_as_deferred_in_a_pass_for_another_node() {
    let mut d = Driver::new(watch_config());
    d.cloud.break_destination(
        Cidr::parse("10.0.0.0/24").unwrap(),
        CloudErrorKind::Retry { after: None },
    );
    d.start(nodes(1));
    d.advance(secs(0.1));
    d.node_event(NodeEvent::Added(node(
        "n1",
        &["10.0.1.0/24"],
        "192.168.0.1",
    )));
    d.advance(secs(0.2));
    assert_eq!(tallies(&d), [(1, 0, 0, 1, 0), (2, 1, 0, 0, 1)]);
}

/// Kills: the `NotFound` guard of a failed delete in `on_op_done` made false or its `==`
/// made `!=`, and its `deleted += 1` made `*=` or `-=`. A delete answered "not found"
/// (someone else removed the route) counts as deleted and is not retried.
#[test]
fn a_delete_of_a_route_already_gone_counts_as_deleted_and_is_not_retried() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("b", "old", "10.0.5.0/24")]);
    cloud.fail_next(Call::Delete, [CloudErrorKind::NotFound]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(vec![]);
    d.advance(secs(60.0));
    assert_eq!(tallies(&d), [(1, 0, 1, 0, 0)]);
    assert_eq!(sent_ops(&d), ["list list", "delete 10.0.5.0/24"]);
    assert_eq!(d.metrics.routes_failing.get(), 0);
}

/// Kills: `deferred += 1` of a refused create in `on_op_done` made `*=` or `-=`, and
/// the deferred count of a create the refusals hold back in `plan_and_queue`. A create
/// refused before any request counts as deferred in its pass, and so does the same
/// create held back by the next pass (it would be refused again).
#[test]
fn a_refused_create_and_the_same_create_held_back_later_count_as_deferred() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.refuse(
        Cidr::parse("10.0.1.0/24").unwrap(),
        Some(("ServerNotInNetwork", true)),
    );
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(2));
    d.advance(secs(10.0));
    d.node_event(NodeEvent::Added(node(
        "n2",
        &["10.0.2.0/24"],
        "192.168.0.2",
    )));
    d.advance(secs(10.0));
    assert_eq!(tallies(&d), [(1, 1, 0, 0, 1), (2, 1, 0, 0, 1)]);
    assert_eq!(creates_to(&d, "10.0.1.0/24"), 1, "{:?}", d.sent);
}

/// Kills: the outcome rule of `maybe_finish` (`created + deleted > 0` with `+` made `-`
/// or `*`, or `>` made `==`, `<` or `>=`). Each finished pass counts once in
/// `route_syncs`: Changed when it created or deleted a route (a delete alone
/// included), Noop when it changed nothing, Error when its list failed.
#[test]
fn each_pass_counts_as_changed_noop_or_error_by_what_it_did() {
    use route_controller::metrics::SyncOutcome;
    let outcomes = |d: &Driver| {
        [SyncOutcome::Changed, SyncOutcome::Noop, SyncOutcome::Error]
            .map(|o| d.metrics.route_syncs(o))
    };
    let mut d = Driver::new(watch_config());
    d.start(nodes(2));
    assert_eq!(outcomes(&d), [1, 0, 0], "a pass that created");
    d.advance(secs(10.0));
    d.node_event(NodeEvent::Added(node("bare", &[], "192.168.0.9")));
    d.advance(secs(10.0));
    assert_eq!(outcomes(&d), [1, 1, 0], "a pass with nothing to do");
    d.node_event(NodeEvent::Deleted(nodes(1).remove(0)));
    d.advance(secs(10.0));
    assert_eq!(outcomes(&d), [2, 1, 0], "a pass that only deleted");
    assert_eq!(tallies(&d).last(), Some(&(3, 0, 1, 0, 0)));

    let cloud = Arc::new(FakeCloud::new());
    cloud.fail_next(Call::List, [CloudErrorKind::Retry { after: None }]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(1));
    assert_eq!(outcomes(&d), [0, 0, 1], "a pass whose list failed");
}

/// Kills: `update_route_gauges` emptied, the `+` of `queued + in flight` made `-` or
/// `*`, and the first `-` of `wanted - pending - failing` made `+`. The route gauges
/// are set as each pass finishes, counting the operations other passes still have
/// queued or in flight: here one in flight and one queued of three wanted routes.
#[test]
fn the_route_gauges_count_what_other_passes_still_have_queued_or_in_flight() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(3));
    assert!(d.answer_one(), "the startup pass's list");
    assert!(d.answer_one(), "n0's create; n1's goes out, n2's is queued");
    d.now += secs(1.0);
    d.node_event(NodeEvent::Added(node("bare", &[], "192.168.0.9")));
    d.feed(Input::Tick);
    assert_eq!(tallies(&d), [(2, 0, 0, 0, 0)], "the second pass finished");
    assert_eq!(
        (
            d.metrics.routes_pending.get(),
            d.metrics.routes_ok.get(),
            d.metrics.routes_failing.get()
        ),
        (2, 1, 0)
    );
}

/// Kills: `failed += 1` made `*=` or `-=` for a create the cloud refused because its
/// table is full. Another writer filled the table since the list: the create that
/// finds no room counts as failed in its pass.
#[test]
fn a_create_that_finds_the_table_full_counts_as_failed() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("vpn", "", "192.168.100.0/24")]);
    cloud.set_route_limit(Some(3));
    let mut d = Driver::with_cloud(watch_config(), cloud.clone());
    d.list(nodes(2));
    assert!(d.answer_one(), "the list: both creates fit");
    assert_eq!(d.pending.len(), 2);
    cloud.seed([route("other", "", "192.168.101.0/24")]); // another writer
    d.settle();
    assert_eq!(tallies(&d), [(1, 1, 0, 1, 0)]);
}

/// Kills: `deferred += 1` made `*=` or `-=` for the create a failed delete holds back
/// in `on_op_done`. The pass that planned the replacement reports the failed delete
/// and the create that waits for its retry; the retry's pass makes both.
#[test]
fn a_create_held_back_by_a_failed_delete_counts_as_deferred() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("a", "old", "10.0.0.0/24")]);
    cloud.fail_next(Call::Delete, [CloudErrorKind::Retry { after: None }]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(1));
    d.advance(secs(5.0));
    assert_eq!(tallies(&d), [(1, 0, 0, 1, 1), (2, 1, 1, 0, 0)]);
}

/// Kills: `deferred += 1` made `*=` or `-=` in `dispatch` for a queued create whose
/// node is gone by the time it would go out. In poll mode a node change starts no pass
/// that could drop the queued create: dispatch drops it and the pass that queued it
/// reports it deferred.
#[test]
fn a_queued_create_whose_node_is_gone_at_dispatch_counts_as_deferred() {
    let mut config = watch_config();
    config.mode = Mode::Poll;
    config.max_in_flight = 1;
    let mut d = Driver::new(config);
    d.list(nodes(2));
    assert!(d.answer_one(), "the startup pass's list");
    d.node_event(NodeEvent::Deleted(nodes(2).remove(1)));
    assert!(d.answer_one(), "n0's create");
    assert_eq!(sent_ops(&d), ["list list", "create 10.0.0.0/24"]);
    assert_eq!(tallies(&d), [(1, 1, 0, 0, 1)]);
    d.advance(secs(10.0));
    assert_eq!(d.cloud_routes(), vec![("n0".into(), "10.0.0.0/24".into())]);
}

/// Kills: `&&` made `||` in `created = Create && result.is_ok()` (`on_op_done`). Only a
/// route that was made gets the follow-up look for a node that changed while its create
/// was in flight: in poll mode (no pass for node changes) n0 loses its pod CIDR during
/// its create; a success starts a follow-up pass at once that deletes the route, a
/// failure starts none (nothing was made; the next poll looks again).
#[test]
fn only_a_create_that_succeeded_gets_a_follow_up_for_a_node_that_changed_meanwhile() {
    for (fails, passes, ops) in [
        (
            false,
            2,
            &[
                "list list",
                "create 10.0.0.0/24",
                "list list",
                "delete 10.0.0.0/24",
            ][..],
        ),
        (true, 1, &["list list", "create 10.0.0.0/24"][..]),
    ] {
        let mut config = watch_config();
        config.mode = Mode::Poll;
        let mut d = Driver::new(config);
        if fails {
            d.cloud
                .fail_next(Call::Create, [CloudErrorKind::Retry { after: None }]);
        }
        d.list(nodes(1));
        assert!(d.answer_one(), "the startup pass's list");
        d.now += secs(1.0);
        d.node_event(NodeEvent::Modified(node("n0", &[], "192.168.0.0")));
        d.settle();
        assert_eq!(d.passes(), passes, "create fails: {fails}");
        assert_eq!(sent_ops(&d), ops, "create fails: {fails}");
    }
}

/// Kills: `||` made `&&` in `pass_due` (`on_op_done`). A pass already waiting to list
/// will see what a create made for a node that changed meanwhile, so the create adds no
/// follow-up: n1's ambiguous reply makes the view stale, so the pass for n0's change
/// waits to list while n0's create is in flight; that one pass deletes the route.
#[test]
fn a_create_answered_while_a_pass_waits_to_list_adds_no_follow_up() {
    let mut d = Driver::new(watch_config());
    d.list(nodes(2));
    assert!(d.answer_one(), "the startup pass's list");
    d.pending.swap(0, 1);
    d.cloud.fail_next(Call::Create, [CloudErrorKind::Ambiguous]);
    assert!(d.answer_one(), "n1's create, ambiguous");
    d.now += secs(0.1);
    d.node_event(NodeEvent::Modified(bumped(
        node("n0", &[], "192.168.0.0"),
        2,
    )));
    assert_eq!(d.passes(), 2, "n0's pass waits to list");
    d.settle();
    d.advance(secs(0.3)); // before n1's retry
    assert_eq!(d.passes(), 2);
    assert_eq!(
        sent_ops(&d),
        [
            "list list",
            "create 10.0.0.0/24",
            "create 10.0.1.0/24",
            "list list",
            "delete 10.0.0.0/24"
        ]
    );
}

/// Kills: `<` made `<=` or `==` in `dispatch_order`'s `deletes_first`. Deletes jump
/// the queue only when the room left is smaller than the creates waiting: with room
/// for exactly the two queued creates, they go in the order they were queued, before
/// the delete planned after them.
#[test]
fn with_room_for_every_queued_create_the_queue_keeps_its_order() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("vpn", "", "192.168.100.0/24")]);
    cloud.set_route_limit(Some(5));
    let mut config = watch_config();
    config.max_in_flight = 1;
    let mut d = Driver::with_cloud(config, cloud);
    d.start(nodes(1)); // vpn and n0: room 3
    for n in nodes(4).into_iter().skip(1) {
        d.node_event(NodeEvent::Added(n)); // n1's create goes at once
    }
    d.now += secs(0.1);
    d.feed(Input::Tick); // n2's and n3's queue behind it
    d.node_event(NodeEvent::Deleted(nodes(1).remove(0))); // the delete behind them
    assert!(d.answer_one(), "n1's create: room 2 for 2 queued creates");
    d.settle();
    assert_eq!(
        sent_ops(&d)[2..],
        [
            "create 10.0.1.0/24",
            "create 10.0.2.0/24",
            "create 10.0.3.0/24",
            "delete 10.0.0.0/24"
        ]
    );
}

/// Kills: `deferred += 1` made `*=` or `-=` in `hold_what_cannot_fit`. Creates held
/// for want of room in the route table count as deferred in the pass that queued them:
/// room for one of three, so two are held.
#[test]
fn creates_held_for_want_of_room_count_as_deferred() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed([route("vpn", "", "192.168.100.0/24")]);
    cloud.set_route_limit(Some(2));
    let mut d = Driver::with_cloud(watch_config(), cloud);
    d.start(nodes(3));
    assert_eq!(tallies(&d), [(1, 1, 0, 0, 2)]);
    assert_eq!(d.count("create"), 1);
}
