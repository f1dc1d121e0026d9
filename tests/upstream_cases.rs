//! Every upstream test case (testdata/upstream/cases.json), run through the planner and
//! through the controller with the in-memory cloud, asserting the exact cloud
//! operations, final routes, condition writes and events.

#[path = "support/driver.rs"]
mod driver;

use std::collections::BTreeSet;
use std::sync::Arc;

use driver::Driver;
use route_controller::cloud::fake::FakeCloud;
use route_controller::model::{Cidr, Condition, Node, NodeAddress, Route};
use route_controller::plan;
use route_controller::{CloudOp, Config, Mode, NodeEvent};
use serde::Deserialize;

#[derive(Deserialize)]
struct Cases {
    reconcile: Vec<ReconcileCase>,
    responsibility: Vec<ResponsibilityCase>,
    conditions: Vec<ConditionCase>,
    triggers: Vec<TriggerCase>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReconcileCase {
    id: String,
    name: String,
    cluster_name: String,
    #[serde(rename = "clusterCIDRs")]
    cluster_cidrs: Vec<String>,
    nodes: Vec<Node>,
    routes: Vec<Route>,
    expect: Expect,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Expect {
    deletes: Vec<String>,
    creates: Vec<ExpectedCreate>,
    conditions: Vec<ExpectedCondition>,
    final_routes: Vec<Route>,
    events: Vec<ExpectedEvent>,
}

#[derive(Deserialize, Debug, PartialEq, Eq, PartialOrd, Ord, Clone)]
#[serde(rename_all = "camelCase")]
struct ExpectedCreate {
    target_node: String,
    #[serde(rename = "destinationCIDR")]
    destination_cidr: String,
    name_hint: String,
    target_node_addresses: Vec<NodeAddress>,
}

#[derive(Deserialize, Debug)]
struct ExpectedCondition {
    node: String,
    status: String,
    reason: String,
    message: String,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "camelCase")]
struct ExpectedEvent {
    node: String,
    uid: String,
    reason: String,
    message_prefix: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponsibilityCase {
    id: String,
    #[serde(rename = "clusterCIDRs")]
    cluster_cidrs: Vec<String>,
    destination: String,
    responsible: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConditionCase {
    id: String,
    existing: Option<Condition>,
    routes_created: bool,
    write: Option<Condition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TriggerCase {
    id: String,
    old: Node,
    new: Node,
    upstream_watch: bool,
    watch: bool,
}

fn cases() -> Cases {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/upstream/cases.json");
    let text = std::fs::read_to_string(path).expect("testdata/upstream/cases.json");
    serde_json::from_str(&text).expect("cases.json parses")
}

fn parse_cidrs(list: &[String]) -> Vec<Cidr> {
    list.iter()
        .map(|c| Cidr::parse(c).expect("cluster CIDR"))
        .collect()
}

#[test]
fn all_upstream_cases_are_transcribed() {
    let c = cases();
    assert_eq!(c.reconcile.len(), 17);
    assert_eq!(c.responsibility.len(), 12);
    assert_eq!(c.conditions.len(), 9);
    assert!(c.triggers.len() >= 4);
}

#[test]
fn planner_matches_every_reconcile_case() {
    for case in cases().reconcile {
        let p = plan::plan(&case.nodes, &case.routes, &parse_cidrs(&case.cluster_cidrs));
        let deletes: BTreeSet<String> = p.deletes.iter().map(|d| d.route.name.clone()).collect();
        let expected: BTreeSet<String> = case.expect.deletes.iter().cloned().collect();
        assert_eq!(deletes, expected, "{} {}: deletes", case.id, case.name);
        assert_eq!(
            p.deletes.len(),
            case.expect.deletes.len(),
            "{}: a route deleted twice",
            case.id
        );

        let creates: Vec<ExpectedCreate> = plan::requests(&p, &case.nodes)
            .iter()
            .map(|c| ExpectedCreate {
                target_node: c.route.target_node.clone(),
                destination_cidr: c.route.destination_cidr.clone(),
                name_hint: c.name_hint.clone(),
                target_node_addresses: c.route.target_node_addresses.clone(),
            })
            .collect();
        assert_eq!(
            creates, case.expect.creates,
            "{} {}: creates (in node, then pod-CIDR order)",
            case.id, case.name
        );

        let conditions = plan::conditions_on_success(&p);
        assert_eq!(
            conditions.len(),
            case.expect.conditions.len(),
            "{}: conditions {conditions:?}",
            case.id
        );
        for ((routing, written), want) in conditions.iter().zip(&case.expect.conditions) {
            assert_eq!(routing.node, want.node, "{}", case.id);
            assert_eq!(
                (
                    written.status.as_ref(),
                    written.reason.as_ref(),
                    written.message.as_ref()
                ),
                (
                    want.status.as_ref(),
                    want.reason.as_ref(),
                    want.message.as_ref()
                ),
                "{}: condition of {}",
                case.id,
                want.node
            );
        }
    }
}

#[test]
fn controller_with_the_fake_cloud_matches_every_reconcile_case() {
    for case in cases().reconcile {
        let cloud = Arc::new(FakeCloud::new());
        cloud.seed(case.routes.clone());
        let mut config = Config::new(parse_cidrs(&case.cluster_cidrs));
        config.cluster_name = case.cluster_name.clone();
        config.seed = Some(1);
        let mut d = Driver::with_cloud(config, cloud);
        d.start(case.nodes.clone());

        let mut deleted = BTreeSet::new();
        let mut created = Vec::new();
        let mut deleted_destinations: Vec<String> = Vec::new();
        for (_, op) in &d.sent {
            match op {
                CloudOp::Delete { route, .. } => {
                    assert!(
                        deleted.insert(route.name.clone()),
                        "{}: {} deleted twice",
                        case.id,
                        route.name
                    );
                    deleted_destinations.push(route.destination_cidr.clone());
                }
                CloudOp::Create {
                    route, name_hint, ..
                } => {
                    created.push(ExpectedCreate {
                        target_node: route.target_node.clone(),
                        destination_cidr: route.destination_cidr.clone(),
                        name_hint: name_hint.clone(),
                        target_node_addresses: route.target_node_addresses.clone(),
                    });
                }
                CloudOp::List { .. } => {}
                other => panic!(
                    "{}: an operation this test does not know: {other:?}",
                    case.id
                ),
            }
        }
        // A create for a destination that is also deleted comes after that delete.
        for (i, (_, op)) in d.sent.iter().enumerate() {
            if let CloudOp::Create { route, .. } = op {
                let later_delete = d.sent[i..].iter().any(
                    |(_, o)| matches!(o, CloudOp::Delete { route: r, .. } if r.destination_cidr == route.destination_cidr),
                );
                assert!(
                    !later_delete,
                    "{}: create for {} sent before its delete",
                    case.id, route.destination_cidr
                );
            }
        }
        let expected: BTreeSet<String> = case.expect.deletes.iter().cloned().collect();
        assert_eq!(deleted, expected, "{} {}: deletes", case.id, case.name);
        let mut want_creates = case.expect.creates.clone();
        want_creates.sort();
        created.sort();
        assert_eq!(created, want_creates, "{} {}: creates", case.id, case.name);

        let mut final_routes = d.cloud.routes();
        let mut want = case.expect.final_routes.clone();
        final_routes.sort_by(|a, b| a.name.cmp(&b.name));
        want.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(
            final_routes, want,
            "{} {}: final cloud routes",
            case.id, case.name
        );

        for want in &case.expect.conditions {
            let got = d
                .conditions
                .get(&want.node)
                .unwrap_or_else(|| panic!("{}: no condition on {}", case.id, want.node));
            assert_eq!(
                (got.status.as_ref(), got.reason.as_ref()),
                (want.status.as_ref(), want.reason.as_ref()),
                "{}",
                case.id
            );
        }
        assert_eq!(
            d.conditions.len(),
            case.expect.conditions.len(),
            "{}: conditions {:?}",
            case.id,
            d.conditions
        );
        assert_eq!(
            d.events.len(),
            case.expect.events.len(),
            "{}: events {:?}",
            case.id,
            d.events
        );
        for (got, want) in d.events.iter().zip(&case.expect.events) {
            assert_eq!(
                (got.node.as_str(), got.uid.as_str(), got.reason),
                (want.node.as_str(), want.uid.as_str(), want.reason.as_ref())
            );
            assert!(
                got.message.starts_with(&want.message_prefix),
                "{}: {}",
                case.id,
                got.message
            );
        }
        assert!(
            d.reports.iter().all(|r| r.failed == 0),
            "{}: {:?}",
            case.id,
            d.reports
        );
    }
}

#[test]
fn responsibility_filter_matches_every_case() {
    for case in cases().responsibility {
        let dest = Cidr::parse(&case.destination).unwrap();
        assert_eq!(
            plan::is_responsible(&dest, &parse_cidrs(&case.cluster_cidrs)),
            case.responsible,
            "{}",
            case.id
        );
    }
}

#[test]
fn condition_skip_rule_matches_every_case() {
    for case in cases().conditions {
        let got = plan::network_condition(case.routes_created, case.existing.as_ref());
        assert_eq!(got, case.write, "{}", case.id);
    }
}

#[test]
fn trigger_filter_matches_every_case_in_each_mode() {
    for case in cases().triggers {
        for (mode, expected) in [
            (Mode::Watch, case.watch),
            (Mode::UpstreamWatch, case.upstream_watch),
            (Mode::Poll, false),
        ] {
            let mut config = Config::new(vec![Cidr::parse("10.0.0.0/8").unwrap()]);
            config.mode = mode;
            config.seed = Some(3);
            let mut d = Driver::new(config);
            d.start(vec![case.old.clone()]);
            d.advance(std::time::Duration::from_secs(60));
            let before = d
                .metrics
                .triggers(route_controller::metrics::TriggerKind::NodeUpdate);
            d.node_event(NodeEvent::Modified(case.new.clone()));
            let after = d
                .metrics
                .triggers(route_controller::metrics::TriggerKind::NodeUpdate);
            assert_eq!(
                after > before,
                expected,
                "{} in {} mode",
                case.id,
                mode.as_str()
            );
        }
    }
}
