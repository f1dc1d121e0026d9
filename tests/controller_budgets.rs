//! Budgets per kind of request (issue 26, items 1 and 2), in virtual time against the
//! in-memory cloud: a provider declares several buckets and what each operation
//! draws from them, as EC2 keeps a bucket per API action. An operation goes only when
//! every bucket it draws from can pay; a reply corrects the bucket it drew from; a
//! refusal in one bucket holds back only what draws from it; and without
//! `--concurrent-route-operations` the operations in flight follow from the budget,
//! within upstream's 200.

#[path = "support/driver.rs"]
mod driver;

use std::time::Duration;

use driver::*;
use route_controller::model::Node;
use route_controller::{
    Budget, BudgetOp, CloudError, CloudErrorKind, CloudOp, CloudReply, Input, NodeEvent, Usage,
};

fn n(i: usize) -> Node {
    node(
        &format!("n{i}"),
        &[&format!("10.0.{i}.0/24")],
        &format!("192.168.0.{i}"),
    )
}

fn nodes(count: usize) -> Vec<Node> {
    (0..count).map(n).collect()
}

/// When each create was sent, in order.
fn create_times(d: &Driver) -> Vec<Duration> {
    d.sent
        .iter()
        .filter(|(_, op)| op_kind(op) == "create")
        .map(|(at, _)| *at)
        .collect()
}

/// Steps the controller from deadline to deadline up to `until` (virtual time since
/// the start), answering nothing: operations stay in flight.
fn tick_until(d: &mut Driver, until: Duration) {
    while let Some(deadline) = d.ctrl.next_deadline() {
        if deadline - d.t0 > until {
            break;
        }
        d.now = d.now.max(deadline);
        d.feed(Input::Tick);
    }
    d.now = d.t0 + until;
    d.feed(Input::Tick);
}

/// Answers pending operations as they come, until `until`, stepping from deadline to
/// deadline.
fn run_until(d: &mut Driver, until: Duration) {
    d.settle();
    while let Some(deadline) = d.ctrl.next_deadline() {
        if deadline - d.t0 > until {
            break;
        }
        d.now = d.now.max(deadline);
        d.feed(Input::Tick);
        d.settle();
    }
}

/// Guards rule (a): a create that draws from two buckets goes only when both can pay.
/// `CreateRoute` has room for ten, `DescribeInstances` for two, refilling one a
/// second: two creates go at once and the others a second apart, as the smaller
/// bucket allows. Check only the first bucket a create draws from (take the `min` of
/// the buckets' ready times in `Spending::ready_at` instead of the `max`) and all five
/// go at once.
#[test]
fn an_operation_goes_only_when_every_bucket_it_draws_from_can_pay() {
    let mut config = watch_config();
    config.budget = Some(
        Budget::new(100.0, 100)
            .bucket("CreateRoute", 1.0, 10)
            .bucket("DescribeInstances", 1.0, 2)
            .draw(BudgetOp::Create, "CreateRoute", 1)
            .draw(BudgetOp::Create, "DescribeInstances", 1),
    );
    let mut d = Driver::new(config);
    d.list(nodes(5));
    run_until(&mut d, secs(10.0));
    assert_eq!(
        create_times(&d),
        vec![secs(0.0), secs(0.0), secs(1.0), secs(2.0), secs(3.0)]
    );
}

/// Guards rule (b): a reply corrects the bucket it drew from. The list is charged one
/// `DescribeRouteTables` when sent and reports three (pages), so that bucket, of four
/// tokens, has one left: of three creates that also draw from it, one goes at once
/// and the others a second apart. Charge the report to the default bucket instead
/// (all of `Usage::spent_by_bucket` to `Budget::DEFAULT_BUCKET`) and all three go
/// at once.
#[test]
fn a_reply_corrects_the_bucket_it_drew_from() {
    let mut config = watch_config();
    config.budget = Some(
        Budget::new(100.0, 100)
            .bucket("DescribeRouteTables", 1.0, 4)
            .bucket("CreateRoute", 100.0, 100)
            .draw(BudgetOp::List, "DescribeRouteTables", 1)
            .draw(BudgetOp::Create, "DescribeRouteTables", 1)
            .draw(BudgetOp::Create, "CreateRoute", 1),
    );
    let mut d = Driver::new(config);
    d.list(nodes(3));
    let (id, op) = d.pending.pop_front().expect("the list goes first");
    assert!(matches!(op, CloudOp::List { .. }), "{op:?}");
    let spent = Usage::default().in_bucket("DescribeRouteTables", 3);
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Spent(spent),
    });
    let reply = route_controller::run_op(d.cloud.as_ref(), "kubernetes", &op, &d.metrics);
    d.feed(Input::Cloud { id, reply });
    run_until(&mut d, secs(10.0));
    assert_eq!(create_times(&d), vec![secs(0.0), secs(1.0), secs(2.0)]);
}

/// Guards rule (c): a refusal in one bucket holds back only the operations that draw
/// from it. Creates draw from `CreateRoute`, deletes from `DeleteRoute`, both from a
/// bucket they share; one operation at a time (an explicit cap of one in flight).
/// Three nodes have their routes, two need one; the first create is refused by
/// `CreateRoute` for 30 s, then the three routed nodes are deleted: their deletes go
/// at once, the creates only after 30 s. Block every bucket the create draws from
/// (ignore the bucket the report names in `Spending::settle`, or let its
/// `RateLimited` answer block them all in `Spending::throttled_answer`) and the
/// deletes wait 30 s too; stop at the first operation that cannot pay, as dispatch
/// did with one bucket, and the requeued create holds the deletes back behind it.
#[test]
fn a_refusal_in_one_bucket_holds_back_only_the_operations_that_draw_from_it() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    config.budget = Some(
        Budget::new(100.0, 100)
            .bucket("Shared", 100.0, 100)
            .bucket("CreateRoute", 100.0, 100)
            .bucket("DeleteRoute", 100.0, 100)
            .draw(BudgetOp::Create, "Shared", 1)
            .draw(BudgetOp::Create, "CreateRoute", 1)
            .draw(BudgetOp::Delete, "Shared", 1)
            .draw(BudgetOp::Delete, "DeleteRoute", 1),
    );
    let mut d = Driver::new(config);
    d.cloud.seed((0..3).map(|i| {
        let name = format!("n{i}");
        route(&name, &name, &format!("10.0.{i}.0/24"))
    }));
    d.list(nodes(5));
    assert!(d.answer_one(), "the list");
    let (id, op) = d.pending.pop_front().expect("the first create");
    assert_eq!(op_kind(&op), "create", "{op:?}");
    let after = secs(30.0);
    let spent = Usage::default()
        .in_bucket("CreateRoute", 1)
        .throttled_in("CreateRoute", after);
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Spent(spent),
    });
    let refused = CloudError::new(CloudErrorKind::RateLimited { after }, "throttled");
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Done(Err(refused)),
    });
    for node in nodes(3) {
        d.node_event(NodeEvent::Deleted(node));
    }
    run_until(&mut d, secs(29.0));
    assert_eq!(
        (d.count("delete"), d.count("create")),
        (3, 1),
        "the deletes go while CreateRoute is refused, and no create"
    );
    run_until(&mut d, secs(31.0));
    assert_eq!(
        d.count("create"),
        3,
        "the refused create and the other, after 30 s"
    );
    assert_eq!(d.cloud.routes().len(), 2, "{:?}", d.cloud_routes());
}

/// Guards item 2: without an explicit cap, the operations in flight are as many as
/// the budget pays for at once. `CreateRoute` holds 40 and refills 10 a second; with
/// no answer, 40 creates are in flight and none more goes as the bucket refills
/// (more would only wait on the wire). With the old fixed default of 16, or with
/// the budget's bounds left out (`Spending::at_once` in `affordable_order` and
/// `Spending::in_flight_limit`; then 200 is the bound), it is 16, or 40 + 10 a
/// second.
#[test]
fn without_a_cap_the_budget_decides_how_many_operations_are_in_flight() {
    let mut config = watch_config();
    config.budget = Some(
        Budget::new(100.0, 1000)
            .bucket("CreateRoute", 10.0, 40)
            .draw(BudgetOp::Create, "CreateRoute", 1),
    );
    let mut d = Driver::new(config);
    d.list(nodes(100));
    assert!(d.answer_one(), "the list");
    tick_until(&mut d, secs(5.0));
    assert_eq!(d.pending.len(), 40, "creates in flight");
}

/// Guards item 2's bounds: upstream's 200 stays a ceiling when the budget would pay
/// for more (`Config::max_in_flight`'s default), and `--concurrent-route-operations`
/// (`max_in_flight`) still caps what the budget allows. Default `max_in_flight` to
/// `usize::MAX` and the first case sends 250; ignore `max_in_flight` in
/// `Controller::in_flight_limit` and they send 250, and 40.
#[test]
fn upstreams_200_is_a_ceiling_and_an_explicit_cap_still_caps() {
    let mut config = watch_config();
    config.budget = Some(Budget::new(1000.0, 1000));
    let mut d = Driver::new(config);
    d.list(nodes(250));
    assert!(d.answer_one(), "the list");
    tick_until(&mut d, secs(5.0));
    assert_eq!(d.pending.len(), 200, "at most 200 in flight");

    let mut config = watch_config();
    config.max_in_flight = 8;
    config.budget = Some(
        Budget::new(100.0, 1000)
            .bucket("CreateRoute", 10.0, 40)
            .draw(BudgetOp::Create, "CreateRoute", 1),
    );
    let mut d = Driver::new(config);
    d.list(nodes(100));
    assert!(d.answer_one(), "the list");
    tick_until(&mut d, secs(5.0));
    assert_eq!(d.pending.len(), 8, "the explicit cap");
}

/// Guards that Hetzner's single-bucket budget keeps its behaviour: one change at a
/// time (`mutations_at_once(1)`) is also the bound on operations in flight, and a
/// budget of one bucket draws each operation's `requests_per_*` from it.
#[test]
fn a_budget_of_one_bucket_spends_as_before() {
    let hetzner = Budget::new(1.0, 10)
        .mutations_at_once(1)
        .requests_per_op(1, 2, 2);
    assert_eq!(hetzner.draws(BudgetOp::Create), vec![("requests", 2)]);
    assert_eq!(hetzner.draws(BudgetOp::List), vec![("requests", 1)]);
    assert_eq!(hetzner.operations_at_once(), 1);
    let mut config = watch_config();
    config.budget = Some(hetzner);
    let mut d = Driver::new(config);
    d.list(nodes(3));
    assert!(d.answer_one(), "the list");
    assert_eq!(d.pending.len(), 1, "one change in flight");
    // 10 tokens: the list took 1 and each create takes 2, so four creates' worth
    // were there at once; at one change at a time they go as each is answered.
    run_until(&mut d, secs(10.0));
    assert_eq!(create_times(&d), vec![secs(0.0); 3]);
}

/// Guards rule (c) for the list: a throttled `DescribeRouteTables` holds back the
/// lists, and the creates already queued keep going. One create at a time; the first
/// is answered ambiguously, so the next pass must list; that list is refused by
/// `DescribeRouteTables` for 30 s, and the two creates still queued go meanwhile
/// (the ambiguous one waits for the list). Let a refusal block every bucket
/// (`Spending::throttle_buckets` over all of them), as the one bucket did, and they
/// wait the 30 s.
#[test]
fn a_throttled_list_holds_back_the_lists_and_not_the_queued_creates() {
    let mut config = watch_config();
    config.max_in_flight = 1;
    config.budget = Some(
        Budget::new(100.0, 100)
            .bucket("DescribeRouteTables", 100.0, 100)
            .bucket("CreateRoute", 100.0, 100)
            .draw(BudgetOp::List, "DescribeRouteTables", 1)
            .draw(BudgetOp::Create, "CreateRoute", 1),
    );
    let mut d = Driver::new(config);
    d.list(nodes(4));
    assert!(d.answer_one(), "the list");
    let (id, op) = d.pending.pop_front().expect("the first create");
    assert_eq!(op_kind(&op), "create", "{op:?}");
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Done(Err(CloudError::ambiguous("timed out"))),
    });
    // n0's retry starts a pass that lists before trusting its view again, once
    // n1's create in flight is answered; n2's and n3's creates wait in the queue.
    tick_until(&mut d, secs(2.0));
    assert!(d.answer_one(), "n1's create, sent before the pass began");
    let (id, op) = d.pending.pop_front().expect("the list");
    assert!(matches!(op, CloudOp::List { .. }), "{op:?}");
    assert_eq!(d.count("create"), 2, "n0's (ambiguous) and n1's");
    let after = secs(30.0);
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Spent(
            Usage::default()
                .in_bucket("DescribeRouteTables", 1)
                .throttled_in("DescribeRouteTables", after),
        ),
    });
    let refused = CloudError::new(CloudErrorKind::RateLimited { after }, "throttled");
    d.feed(Input::Cloud {
        id,
        reply: CloudReply::Listed(Err(refused)),
    });
    let refused_at = d.elapsed();
    run_until(&mut d, refused_at + secs(29.0));
    let during = create_times(&d)
        .iter()
        .filter(|at| **at >= refused_at)
        .count();
    assert_eq!(
        during, 2,
        "n2's and n3's creates go while the list is refused"
    );
    assert_eq!(d.count("list"), 2, "and no list");
}
