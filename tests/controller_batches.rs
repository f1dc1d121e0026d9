//! Batched changes (issue 25, item 1), in virtual time against the in-memory cloud set
//! to apply several changes in one request: a pass's creates and deletes go out as one
//! write, at most one is in flight, what is planned meanwhile joins the next one, an
//! idle controller writes at once, and every per-route rule holds inside a batch (its
//! own outcome, retry, room in the table, one operation per destination, deletes only
//! with a whole node view, nothing after the lease is lost).

#[path = "support/driver.rs"]
mod driver;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use driver::*;
use route_controller::cloud::fake::{Call, FakeCloud};
use route_controller::model::{Cidr, Node};
use route_controller::{CloudErrorKind, CloudOp, Input, NodeEvent, RouteChange};

fn n(i: usize) -> Node {
    node(
        &format!("n{i}"),
        &[&format!("10.0.{i}.0/24")],
        &format!("192.168.0.{i}"),
    )
}

fn cidr(s: &str) -> Cidr {
    Cidr::parse(s).expect("test CIDR")
}

/// A driver whose cloud applies up to `size` changes in one request.
fn batching(size: usize) -> Driver {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_batch_size(Some(size));
    let mut config = watch_config();
    config.batch_size = Some(size);
    Driver::with_cloud(config, cloud)
}

/// The changes of every batch sent, in order, each as `create n1` or `delete n1`.
fn batches(d: &Driver) -> Vec<Vec<String>> {
    d.sent
        .iter()
        .filter_map(|(_, op)| match op {
            CloudOp::Apply { changes } => Some(changes.iter().map(describe).collect()),
            _ => None,
        })
        .collect()
}

fn describe(change: &RouteChange) -> String {
    match change {
        RouteChange::Create { route, .. } => format!("create {}", route.destination_cidr),
        RouteChange::Delete { route } => format!("delete {}", route.destination_cidr),
        other => format!("{other:?}"),
    }
}

fn batches_pending(d: &Driver) -> usize {
    d.pending
        .iter()
        .filter(|(_, op)| matches!(op, CloudOp::Apply { .. }))
        .count()
}

fn answer_list(d: &mut Driver) {
    assert!(
        matches!(d.pending.front(), Some((_, CloudOp::List { .. }))),
        "a list is pending: {:?}",
        d.pending
    );
    d.answer_one();
}

/// Guards "one write for the pass": with the batching off in the controller, each
/// route would be its own create.
#[test]
fn a_pass_sends_its_creates_as_one_write() {
    let mut d = batching(100);
    d.start((1..=5).map(n).collect());
    assert_eq!(
        batches(&d),
        vec![
            (1..=5)
                .map(|i| format!("create 10.0.{i}.0/24"))
                .collect::<Vec<_>>()
        ]
    );
    assert_eq!(d.count("create"), 0);
    assert_eq!(d.cloud.counters().get(Call::Apply), 1);
    assert_eq!(d.cloud_routes().len(), 5);
    for i in 1..=5 {
        let c = &d.conditions[&format!("n{i}")];
        assert_eq!(c.status, "False", "n{i}: {c:?}");
    }
}

/// Guards "no window": the write goes out in the same step as the list's answer, and
/// a node added to an idle controller is routed by its first pass's one write.
#[test]
fn an_idle_controller_writes_a_new_nodes_route_at_once() {
    let mut d = batching(100);
    d.start(vec![n(1)]);
    d.advance(secs(60.0));
    let before = d.sent.len();
    d.node_event(NodeEvent::Added(n(2)));
    // The first trigger after a quiet period starts its pass at once; the view is
    // fresh, so the write is the only call.
    assert_eq!(batches_pending(&d), 1, "{:?}", d.pending);
    assert_eq!(d.sent.len(), before + 1);
    assert_eq!(d.sent.last().map(|(at, _)| *at), Some(d.elapsed()));
    d.settle();
    assert_eq!(d.cloud_routes().len(), 2);
}

/// Guards "at most one write in flight" and "planned meanwhile joins the next": with
/// the in-flight check gone, the second batch would go out beside the first.
#[test]
fn changes_planned_during_a_write_join_the_next_one() {
    let mut d = batching(100);
    d.list((1..=3).map(n).collect());
    answer_list(&mut d);
    assert_eq!(batches_pending(&d), 1);
    for i in 4..=6 {
        d.node_event(NodeEvent::Added(n(i)));
        d.now += secs(2.0);
        d.feed(Input::Tick);
        assert_eq!(
            batches_pending(&d),
            1,
            "one write in flight: {:?}",
            d.pending
        );
    }
    d.answer_one();
    assert_eq!(batches_pending(&d), 1);
    d.settle();
    assert_eq!(
        batches(&d),
        vec![
            (1..=3)
                .map(|i| format!("create 10.0.{i}.0/24"))
                .collect::<Vec<_>>(),
            (4..=6).map(|i| format!("create 10.0.{i}.0/24")).collect(),
        ]
    );
    assert_eq!(d.cloud_routes().len(), 6);
}

/// Guards the batch size: a batch never holds more changes than the provider takes.
#[test]
fn a_batch_holds_at_most_the_providers_batch_size() {
    let mut d = batching(2);
    d.list((1..=5).map(n).collect());
    answer_list(&mut d);
    while !d.pending.is_empty() {
        assert!(batches_pending(&d) <= 1);
        d.answer_one();
    }
    let sizes: Vec<usize> = batches(&d).iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 2, 1]);
    assert_eq!(d.cloud_routes().len(), 5);
}

/// Guards "each change keeps its own outcome": one destination the cloud refuses
/// fails alone, is retried alone after its backoff, and its node's condition says so
/// while the others are routed.
#[test]
fn a_failed_change_is_retried_alone_after_its_backoff() {
    let mut d = batching(100);
    d.cloud
        .break_destination(cidr("10.0.1.0/24"), CloudErrorKind::Retry { after: None });
    d.start((1..=3).map(n).collect());
    assert_eq!(d.cloud_routes().len(), 2);
    assert_eq!(d.conditions["n2"].status, "False");
    assert_eq!(d.conditions["n3"].status, "False");
    assert!(d.conditions.get("n1").is_none_or(|c| c.status != "False"));
    d.cloud.heal_destination(cidr("10.0.1.0/24"));
    d.advance(secs(10.0));
    assert_eq!(d.cloud_routes().len(), 3);
    let all = batches(&d);
    assert_eq!(all.last(), Some(&vec!["create 10.0.1.0/24".to_string()]));
    assert_eq!(d.conditions["n1"].status, "False");
}

/// Guards a refusal of the whole write (another writer's change, a busy table): it
/// stands for every change, each is retried, and nothing is reported done before.
#[test]
fn a_write_refused_as_a_whole_is_retried_for_every_route() {
    let mut d = batching(100);
    d.cloud.fail_next(Call::Apply, [CloudErrorKind::Conflict]);
    d.start((1..=3).map(n).collect());
    assert!(d.cloud_routes().is_empty());
    for i in 1..=3 {
        assert!(
            d.conditions
                .get(&format!("n{i}"))
                .is_none_or(|c| c.status != "False"),
            "n{i} reported routed with no route"
        );
    }
    d.advance(secs(10.0));
    assert_eq!(d.cloud_routes().len(), 3);
    assert_eq!(batches(&d).len(), 2);
    assert!(d.conditions.values().all(|c| c.status == "False"));
}

/// Guards the lost reply: the changes may have been made, so the view is not trusted
/// and the next pass lists before it writes again.
#[test]
fn a_lost_reply_makes_the_next_pass_list_first() {
    let mut d = batching(100);
    d.cloud.fail_next(Call::Apply, [CloudErrorKind::Ambiguous]);
    d.start((1..=2).map(n).collect());
    assert_eq!(d.count("list"), 1);
    d.advance(secs(10.0));
    assert!(d.count("list") >= 2, "listed again: {:?}", d.sent);
    assert_eq!(d.cloud_routes().len(), 2);
    // Both routes were made by the lost write: the list shows it, nothing is sent
    // again.
    assert_eq!(batches(&d).len(), 1);
}

/// Guards "one operation per destination": a replacement (the node's address changed)
/// deletes the old route in one write and creates the new one in the next.
#[test]
fn a_replacement_takes_two_writes() {
    let mut d = batching(100);
    d.cloud.set_report_node_addresses(true);
    d.cloud.seed([route_controller::model::Route {
        target_node_addresses: n(1).addresses,
        ..route("r1", "n1", "10.0.1.0/24")
    }]);
    d.start(vec![n(1)]);
    assert!(batches(&d).is_empty(), "{:?}", d.sent);
    let moved = Node {
        addresses: vec![route_controller::model::NodeAddress::internal_ip(
            "192.168.0.99",
        )],
        ..bumped(n(1), 2)
    };
    d.node_event(NodeEvent::Modified(moved));
    d.settle();
    assert_eq!(
        batches(&d),
        [
            vec!["delete 10.0.1.0/24".to_string()],
            vec!["create 10.0.1.0/24".to_string()]
        ]
    );
    let route = d.cloud.route(&cidr("10.0.1.0/24")).expect("route");
    assert_eq!(
        route.target_node_addresses,
        vec![route_controller::model::NodeAddress::internal_ip(
            "192.168.0.99"
        )]
    );
}

/// Guards invariant 1 inside a batch: while the node view relists, a write carries
/// creates only; the delete waits for the whole view.
#[test]
fn deletes_wait_for_a_whole_node_view() {
    let mut d = batching(100);
    d.cloud.seed([route("old", "gone", "10.0.9.0/24")]);
    d.feed(Input::Node(NodeEvent::Init));
    d.feed(Input::Node(NodeEvent::InitApply(n(1))));
    d.feed(Input::Node(NodeEvent::InitDone));
    answer_list(&mut d);
    assert_eq!(
        batches(&d),
        vec![vec![
            "delete 10.0.9.0/24".to_string(),
            "create 10.0.1.0/24".to_string()
        ]]
    );
    d.settle();
    // A relist begins while a new node's write is being planned: nothing goes out
    // until it is whole again.
    d.cloud.seed([route("old2", "gone2", "10.0.8.0/24")]);
    d.advance(secs(400.0));
    d.feed(Input::Node(NodeEvent::Init));
    d.feed(Input::Node(NodeEvent::InitApply(n(1))));
    d.feed(Input::Node(NodeEvent::InitApply(n(2))));
    assert!(d.pending.is_empty(), "{:?}", d.pending);
    d.feed(Input::Node(NodeEvent::InitDone));
    d.settle();
    assert_eq!(
        batches(&d).last(),
        Some(&vec![
            "delete 10.0.8.0/24".to_string(),
            "create 10.0.2.0/24".to_string()
        ])
    );
}

/// Guards room in the table: a write carries no more creates than the table can take;
/// the rest are held with `RouteTableFull`.
#[test]
fn a_write_carries_no_more_creates_than_fit() {
    let mut d = batching(100);
    d.cloud.set_route_limit(Some(3));
    d.start((1..=5).map(n).collect());
    assert_eq!(
        batches(&d).iter().map(Vec::len).collect::<Vec<_>>(),
        vec![3]
    );
    assert_eq!(d.cloud.counters().table_full.load(Ordering::Relaxed), 0);
    assert_eq!(d.cloud_routes().len(), 3);
    let held: Vec<_> = d
        .conditions
        .iter()
        .filter(|(_, c)| c.reason == "RouteTableFull")
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(held.len(), 2, "{:?}", d.conditions);
}

/// A driver whose cloud batches up to 100 changes and takes `per_second` requests a
/// second with a bucket of `burst`, the controller spending the budget it declares.
fn batching_limited(per_second: f64, burst: u32) -> Driver {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_batch_size(Some(100));
    cloud.set_rate_limit(per_second, burst);
    let mut config = watch_config();
    config.batch_size = Some(100);
    config.budget = route_controller::Routes::budget(cloud.as_ref());
    Driver::with_cloud(config, cloud)
}

/// When the batch of 50 changes was sent, in seconds from the start.
fn batch_sent_at(d: &Driver) -> Option<f64> {
    d.sent
        .iter()
        .find(|(_, op)| matches!(op, CloudOp::Apply { .. }))
        .map(|(at, _)| at.as_secs_f64())
}

/// Guards the charge: a write costs one request, whatever it carries, so with two
/// requests in the bucket the list and the write of 50 routes both go at once.
#[test]
fn a_write_is_charged_once_whatever_it_carries() {
    let mut d = batching_limited(1.0, 3);
    d.list((1..=50).map(n).collect());
    d.settle();
    assert_eq!(batch_sent_at(&d), Some(0.0));
    assert_eq!(d.cloud_routes().len(), 50);
    assert_eq!(d.cloud.counters().rate_limited.load(Ordering::Relaxed), 0);
    assert_eq!(d.cloud.counters().total(), 2);
}

/// Guards the budget's wake-up: a write that waits for the bucket is sent as soon as
/// it has refilled (about a second at one request a second), not at the next input.
#[test]
fn a_write_waiting_for_the_budget_goes_when_it_refills() {
    let mut d = batching_limited(1.0, 2);
    d.list((1..=50).map(n).collect());
    d.settle();
    assert_eq!(batch_sent_at(&d), None, "the list took the only request");
    let wake = d.ctrl.next_deadline().map(|at| (at - d.t0).as_secs_f64());
    assert!(wake.is_some_and(|w| (0.9..1.2).contains(&w)), "{wake:?}");
    d.advance(secs(5.0));
    let sent = batch_sent_at(&d);
    assert!(sent.is_some_and(|s| (0.9..1.2).contains(&s)), "{sent:?}");
    assert_eq!(d.cloud_routes().len(), 50);
    assert_eq!(d.cloud.counters().rate_limited.load(Ordering::Relaxed), 0);
}

/// Guards fencing: once the lease is lost nothing more is written, and what was
/// queued behind the write in flight is dropped.
#[test]
fn no_write_goes_out_after_the_lease_is_lost() {
    let mut config = watch_config();
    config.batch_size = Some(2);
    config.leader_election = true;
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_batch_size(Some(2));
    let mut d = Driver::with_cloud(config, cloud);
    d.feed(Input::Leadership(true));
    d.list((1..=5).map(n).collect());
    answer_list(&mut d);
    assert_eq!(batches_pending(&d), 1);
    d.feed(Input::Leadership(false));
    d.settle();
    d.advance(secs(30.0));
    assert_eq!(batches(&d).len(), 1, "{:?}", d.sent);
}

// --- one change the cloud refuses never holds back the others (issue 36, item 1) ---

/// The cloud's rule in the isolation tests, as ARM names it.
const RULE: &str = "InvalidResourceName";

/// The writes answered until the cloud holds `wanted` routes, the controller woken
/// at each of its deadlines in between (every write it sends is counted).
fn writes_until_routed(d: &mut Driver, wanted: usize) -> usize {
    let mut writes = 0;
    while d.cloud_routes().len() < wanted {
        let Some((_, op)) = d.pending.front() else {
            match d.ctrl.next_deadline() {
                Some(at) if at - d.t0 < secs(3600.0) => {
                    d.now = d.now.max(at);
                    d.feed(Input::Tick);
                }
                _ => panic!("never routed: {:?}", d.cloud_routes()),
            }
            continue;
        };
        if matches!(op, CloudOp::Apply { .. }) {
            writes += 1;
        }
        d.answer_one();
    }
    writes
}

/// Guards the number to reach: one change the cloud refuses, naming it, among 50 in
/// one write: the other 49 are routed by the next write (2 in all, within 3), and the
/// node's condition names the cloud's rule. Without the isolation, the 50 fail
/// together and are retried together for good.
#[test]
fn one_named_refusal_among_50_costs_one_more_write() {
    let mut d = batching(100);
    d.cloud.poison(cidr("10.0.17.0/24"), Some((RULE, true)));
    d.list((1..=50).map(n).collect());
    let writes = writes_until_routed(&mut d, 49);
    assert_eq!(writes, 2, "{:?}", batches(&d));
    d.settle();
    assert_eq!(batches(&d)[1].len(), 49);
    assert!(!batches(&d)[1].contains(&"create 10.0.17.0/24".to_string()));
    let c = &d.conditions["n17"];
    assert_eq!((&*c.status, &*c.reason), ("True", RULE), "{c:?}");
    assert!(c.message.contains("10.0.17.0/24"), "{c:?}");
    assert!(
        d.events.iter().any(|e| e.node == "n17" && e.reason == RULE),
        "{:?}",
        d.events
    );
    assert_eq!(d.metrics.route_refusals(RULE), 1);
    assert!(d.metrics.encode().contains(&format!(
        "route_controller_route_refusals_total{{reason=\"{RULE}\"}} 1"
    )));
    for i in (1..=50).filter(|&i| i != 17) {
        assert_eq!(d.conditions[&format!("n{i}")].status, "False", "n{i}");
    }
}

/// Guards the search: the cloud refuses the 50 without saying which is at fault;
/// halves of the suspects go alone until it is found: 1 + ⌈log₂ 50⌉ writes find it,
/// and the other 49 are routed by then or by the next write. Without the splitting,
/// nothing is ever routed.
#[test]
fn an_unnamed_refusal_among_50_is_found_by_halving() {
    for poisoned in [1, 17, 26, 50] {
        let mut d = batching(100);
        d.cloud
            .poison(cidr(&format!("10.0.{poisoned}.0/24")), Some((RULE, false)));
        d.list((1..=50).map(n).collect());
        let writes = writes_until_routed(&mut d, 49);
        assert!(
            writes <= 8,
            "n{poisoned}: {writes} writes: {:?}",
            batches(&d)
        );
        d.settle();
        let c = &d.conditions[&format!("n{poisoned}")];
        assert_eq!((&*c.status, &*c.reason), ("True", RULE), "{c:?}");
        assert_eq!(d.metrics.route_refusals(RULE), 1);
    }
}

/// Guards the elimination: the last change of the batch (the nodes go in name order,
/// n9 last) at fault is found when the halves before it are applied (50, 25, 13, 6,
/// 3, 2 changes: 6 writes), and is refused without being sent alone, its condition
/// saying how it was found.
#[test]
fn the_last_suspect_is_refused_without_a_write() {
    let mut d = batching(100);
    d.cloud.poison(cidr("10.0.9.0/24"), Some((RULE, false)));
    d.list((1..=50).map(n).collect());
    d.settle();
    let sizes: Vec<usize> = batches(&d).iter().map(Vec::len).collect();
    assert_eq!(sizes, [50, 25, 13, 6, 3, 2], "{:?}", batches(&d));
    assert_eq!(d.cloud_routes().len(), 49);
    let c = &d.conditions["n9"];
    assert_eq!((&*c.status, &*c.reason), ("True", RULE), "{c:?}");
    assert!(c.message.contains("splitting"), "{c:?}");
}

/// Guards the pre-check: a change the provider's check refuses never reaches the
/// cloud's write (here the cloud would refuse the whole write for it), so the other
/// 49 take one write.
#[test]
fn a_change_the_precheck_refuses_never_enters_the_write() {
    let mut d = batching(100);
    let bad = cidr("10.0.17.0/24");
    d.cloud.poison(bad, Some((RULE, false)));
    d.cloud.refuse(bad, Some(("InvalidRouteName", false)));
    d.list((1..=50).map(n).collect());
    let writes = writes_until_routed(&mut d, 49);
    assert_eq!(writes, 1, "{:?}", batches(&d));
    d.settle();
    assert_eq!(d.conditions["n17"].reason, "InvalidRouteName");
    assert_eq!(d.metrics.route_refusals("InvalidRouteName"), 1);
    assert_eq!(d.metrics.route_refusals(RULE), 0);
}

/// Guards "never again in a batch": the change the cloud refused is tried again in a
/// write of its own, so a node added meanwhile is not held back by it (poll mode
/// plans both at every poll), and once the operator fixes the cause it is routed.
#[test]
fn a_refused_change_is_retried_alone() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.set_batch_size(Some(100));
    let mut config = watch_config();
    config.batch_size = Some(100);
    config.mode = route_controller::Mode::Poll;
    let mut d = Driver::with_cloud(config, cloud);
    let bad = cidr("10.0.3.0/24");
    d.cloud.poison(bad, Some((RULE, true)));
    d.start((1..=5).map(n).collect());
    assert_eq!(d.cloud_routes().len(), 4);
    let before = batches(&d).len();
    d.node_event(NodeEvent::Added(n(6)));
    d.advance(secs(60.0));
    let later = &batches(&d)[before..];
    assert!(
        later
            .iter()
            .any(|b| b.contains(&"create 10.0.6.0/24".to_string())),
        "{later:?}"
    );
    for b in later {
        assert!(
            !b.contains(&"create 10.0.3.0/24".to_string()) || b.len() == 1,
            "the refused change in a write with others: {later:?}"
        );
    }
    let writes = later.len();
    assert!(writes <= 8, "one write a poll at most: {later:?}");
    assert!(d.cloud.route(&cidr("10.0.6.0/24")).is_some());
    d.cloud.poison(bad, None);
    d.advance(secs(60.0));
    assert!(d.cloud.route(&bad).is_some());
    assert_eq!(d.conditions["n3"].status, "False");
}

/// Guards the end of a search whose reasoning no longer holds: the node at fault is
/// deleted while the first half is out, so the suspects left no longer hold a change
/// at fault; without the end of the search the last of them (n8, healthy) would be
/// refused by elimination. Everything still wanted is routed, nothing refused.
#[test]
fn a_search_ends_when_a_suspect_is_no_longer_wanted() {
    let mut d = batching(100);
    d.cloud.poison(cidr("10.0.5.0/24"), Some((RULE, false)));
    d.list((1..=8).map(n).collect());
    answer_list(&mut d);
    d.answer_one(); // the 8 together: refused
    assert_eq!(
        batches(&d).last().map(Vec::len),
        Some(4),
        "{:?}",
        batches(&d)
    );
    d.node_event(NodeEvent::Deleted(n(5)));
    d.advance(secs(30.0));
    assert_eq!(d.cloud_routes().len(), 7, "{:?}", batches(&d));
    assert!(
        d.conditions.values().all(|c| c.reason != RULE),
        "{:?}",
        d.conditions
    );
    assert_eq!(d.metrics.route_refusals(RULE), 0);
}

/// Guards the search against a suspect re-planned: n8's change is at fault, and while
/// the halves before it are out n8 is replaced by m8, which gets the same pod CIDR
/// (and whatever made n8's change fail does not hold for m8). The CIDR is still
/// queued, but not as the change the cloud refused: the search must end and m8's
/// create go in a write, not be refused by elimination without one.
#[test]
fn a_suspect_replanned_to_another_node_is_written_not_refused() {
    let mut d = batching(100);
    let at_fault = cidr("10.0.8.0/24");
    d.cloud.poison(at_fault, Some((RULE, false)));
    d.list((1..=8).map(n).collect());
    answer_list(&mut d);
    d.answer_one(); // the 8 together: refused
    assert_eq!(
        batches(&d).last().map(Vec::len),
        Some(4),
        "{:?}",
        batches(&d)
    );
    d.cloud.poison(at_fault, None);
    d.node_event(NodeEvent::Deleted(n(8)));
    d.node_event(NodeEvent::Added(node(
        "m8",
        &["10.0.8.0/24"],
        "192.168.0.88",
    )));
    // The pass that re-plans runs while the first half is still out.
    while let Some(at) = d.ctrl.next_deadline().filter(|&at| at < d.now + secs(1.0)) {
        d.now = d.now.max(at);
        d.feed(Input::Tick);
    }
    assert_eq!(batches_pending(&d), 1, "the first half is still out");
    d.advance(secs(30.0));
    let route = d.cloud.route(&at_fault);
    assert_eq!(
        route.map(|r| r.target_node),
        Some("m8".to_string()),
        "{:?}",
        batches(&d)
    );
    assert_eq!(d.metrics.route_refusals(RULE), 0, "{:?}", d.conditions);
}

/// Guards the search against a suspect whose request changed: n8's change is at
/// fault, and while the first half is out n8 gets a new address (the usual fix for a
/// next-hop the cloud refuses). Its create is still queued for n8, but it is not the
/// request the cloud refused: the search must end and the new request go in a
/// write, not be refused by elimination without one.
#[test]
fn a_suspect_whose_node_changed_its_address_is_written_not_refused() {
    let mut d = batching(100);
    let at_fault = cidr("10.0.8.0/24");
    d.cloud.poison(at_fault, Some((RULE, false)));
    d.list((1..=8).map(n).collect());
    answer_list(&mut d);
    d.answer_one(); // the 8 together: refused
    assert_eq!(
        batches(&d).last().map(Vec::len),
        Some(4),
        "{:?}",
        batches(&d)
    );
    d.cloud.poison(at_fault, None);
    let mut moved = node("n8", &["10.0.8.0/24"], "192.168.0.99");
    moved.resource_version = "2".into();
    d.node_event(NodeEvent::Modified(moved));
    while let Some(at) = d.ctrl.next_deadline().filter(|&at| at < d.now + secs(1.0)) {
        d.now = d.now.max(at);
        d.feed(Input::Tick);
    }
    assert_eq!(batches_pending(&d), 1, "the first half is still out");
    d.advance(secs(30.0));
    assert!(d.cloud.route(&at_fault).is_some(), "{:?}", batches(&d));
    assert_eq!(d.metrics.route_refusals(RULE), 0, "{:?}", d.conditions);
}

/// Guards the end of a search that cannot go on: another writer fills the table
/// while the 4 changes refused together are split, so the first half makes one route
/// and finds the table full, and the next half cannot be sent; meanwhile n5 was
/// removed, and its delete would make room. The search must stop, or nothing but its
/// halves may go and the delete waits for ever. Fails without the stop in
/// `dispatch_batch`.
#[test]
fn a_search_whose_next_half_cannot_be_sent_stops() {
    let mut d = batching(100);
    d.cloud.set_route_limit(Some(5));
    d.cloud.seed([route("kubernetes-n5", "n5", "10.0.5.0/24")]);
    d.cloud.poison(cidr("10.0.4.0/24"), Some((RULE, false)));
    d.list((1..=5).map(n).collect());
    answer_list(&mut d);
    d.cloud
        .seed((0..3).map(|i| route(&format!("other-{i}"), "", &format!("192.168.{i}.0/24"))));
    d.answer_one(); // the 4 creates together: refused
    d.node_event(NodeEvent::Deleted(n(5)));
    // The pass that plans n5's delete runs while the first half is still out.
    while let Some(at) = d.ctrl.next_deadline().filter(|&at| at < d.now + secs(1.0)) {
        d.now = d.now.max(at);
        d.feed(Input::Tick);
    }
    assert_eq!(batches(&d).len(), 2, "{:?}", batches(&d));
    d.answer_one(); // the first half: n1 made, n2 refused for want of room
    d.advance(secs(30.0));
    assert!(
        d.cloud.route(&cidr("10.0.5.0/24")).is_none(),
        "{:?}",
        batches(&d)
    );
}

/// Guards a replacement whose delete the cloud refuses: the old route is still
/// there, so the create queued behind the delete would fail too; it waits for the
/// delete's retry, as after any other failed delete, instead of going in the next
/// write. Fails with the create left queued on a refusal.
#[test]
fn a_refused_delete_holds_back_the_create_that_replaces_it() {
    let mut d = batching(100);
    d.cloud.set_report_node_addresses(true);
    d.cloud.seed([route_controller::model::Route {
        target_node_addresses: n(1).addresses,
        ..route("r1", "n1", "10.0.1.0/24")
    }]);
    d.start(vec![n(1), n(2)]);
    let before = batches(&d).len();
    let moved = Node {
        addresses: vec![route_controller::model::NodeAddress::internal_ip(
            "192.168.0.99",
        )],
        ..bumped(n(1), 2)
    };
    d.cloud.poison(cidr("10.0.1.0/24"), Some((RULE, true)));
    d.node_event(NodeEvent::Modified(moved));
    d.advance(secs(5.0));
    let later = &batches(&d)[before..];
    assert_eq!(later.first(), Some(&vec!["delete 10.0.1.0/24".to_string()]));
    assert!(
        later.iter().flatten().all(|c| c != "create 10.0.1.0/24"),
        "{later:?}"
    );
    assert_eq!(d.metrics.route_refusals(RULE), 1);
}

/// Guards the count of cloud requests when the pre-check refuses a whole batch: no
/// write leaves, so none is counted in `route_controller_cloud_requests_total`, as
/// none is for a single create the pre-check refuses; each refusal is counted once.
/// Fails with the worker counting the write it did not send.
#[test]
fn a_batch_the_precheck_refuses_whole_counts_no_request() {
    let mut d = batching(100);
    for i in 1..=2 {
        d.cloud.refuse(
            cidr(&format!("10.0.{i}.0/24")),
            Some(("InvalidRouteName", false)),
        );
    }
    d.list((1..=2).map(n).collect());
    answer_list(&mut d);
    d.answer_one(); // the batch of both: refused before any request
    assert_eq!(batches(&d).len(), 1, "{:?}", batches(&d));
    assert_eq!(
        d.metrics
            .cloud_requests(route_controller::CloudOperation::Apply),
        0
    );
    assert_eq!(d.metrics.route_refusals("InvalidRouteName"), 2);
}
