//! Choosing which nodes get routes (`--node-selector`, nodes of other providers), in
//! virtual time: an unselected node gets no route, no condition and no event; its
//! routes are left alone unless the controller is told to delete them; a node that is
//! gone loses its routes as before; selecting or unselecting a node is a trigger.
//!
//! The node watch applies the filter and sends an unselected node by name
//! (`NodeEvent::Unselected`, `NodeEvent::InitUnselected`); these tests feed those
//! events to the controller directly.

#[path = "support/driver.rs"]
mod driver;

use std::sync::Arc;
use std::time::Duration;

use driver::*;
use route_controller::cloud::fake::FakeCloud;
use route_controller::node_filter::Unselected;
use route_controller::{CloudOp, Command, Config, Input, NodeEvent};

fn unselected(name: &str) -> NodeEvent {
    NodeEvent::Unselected {
        name: name.into(),
        provider_id: None,
        why: Unselected::ByLabels,
    }
}

fn n(i: usize) -> route_controller::model::Node {
    node(
        &format!("n{i}"),
        &[&format!("10.0.{i}.0/24")],
        &format!("192.168.0.{i}"),
    )
}

/// Lists `routed` nodes and `unselected` names as one complete list, and settles.
fn start(d: &mut Driver, routed: &[usize], not_routed: &[usize]) {
    d.feed(Input::Node(NodeEvent::Init));
    for &i in routed {
        d.feed(Input::Node(NodeEvent::InitApply(n(i))));
    }
    for &i in not_routed {
        d.feed(Input::Node(NodeEvent::InitUnselected {
            name: format!("n{i}"),
            provider_id: Some(format!("hrobot://{i}")),
            why: Unselected::OtherProvider,
        }));
    }
    d.feed(Input::Node(NodeEvent::InitDone));
    d.settle();
}

fn cloud_with(routes: &[(&str, &str)]) -> Arc<FakeCloud> {
    let cloud = Arc::new(FakeCloud::new());
    cloud.seed(
        routes
            .iter()
            .map(|(target, cidr)| route(&format!("r-{target}"), target, cidr)),
    );
    cloud
}

fn pair(target: &str, cidr: &str) -> (String, String) {
    (target.to_string(), cidr.to_string())
}

fn deleting_config() -> Config {
    let mut c = watch_config();
    c.delete_routes_of_unselected_nodes = true;
    c
}

/// Guards the filter's whole point: the unselected node (a Robot server, say) is never
/// routed and never written to.
#[test]
fn an_unselected_node_gets_no_route_no_condition_and_no_event() {
    let mut d = Driver::new(watch_config());
    start(&mut d, &[0], &[1]);
    d.advance(Duration::from_secs(3600));
    assert_eq!(d.cloud_routes(), vec![pair("n0", "10.0.0.0/24")]);
    assert!(d.conditions.contains_key("n0"));
    assert!(!d.conditions.contains_key("n1"), "{:?}", d.conditions);
    assert!(d.events.is_empty(), "{:?}", d.events);
    assert_eq!(d.count("create"), 1);
}

/// Guards "node gone" against "node exists but unselected": the first loses its
/// route, the second keeps it. And the list tells the provider the unselected node's
/// name and providerID, so that its route is not taken for a route to nobody (the
/// end-to-end test shows that case with a node named unlike its server).
#[test]
fn an_unselected_nodes_routes_are_left_alone_and_a_gone_nodes_are_deleted() {
    let cloud = cloud_with(&[("n1", "10.0.1.0/24"), ("n2", "10.0.2.0/24")]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    start(&mut d, &[0], &[1]);
    assert_eq!(
        d.cloud_routes(),
        vec![pair("n0", "10.0.0.0/24"), pair("n1", "10.0.1.0/24")]
    );
    assert_eq!(d.count("delete"), 1, "only n2's route: {:?}", d.sent);
    let listed = d.sent.iter().find_map(|(_, op)| match op {
        CloudOp::List { nodes } => Some(nodes.clone()),
        _ => None,
    });
    assert!(listed.is_some_and(
        |dir| dir.has_node("n1") && dir.node_by_provider_id("hrobot://1") == Some("n1")
    ));
    // Days of resyncs do not change that.
    d.advance(Duration::from_secs(3 * 24 * 3600));
    assert!(d.cloud_routes().contains(&pair("n1", "10.0.1.0/24")));
    assert!(!d.conditions.contains_key("n1"));
}

/// Guards the opt-in: with --delete-routes-of-unselected-nodes an unselected node's
/// route goes, and still no condition is written on it.
#[test]
fn with_the_delete_flag_an_unselected_nodes_routes_are_deleted() {
    let cloud = cloud_with(&[("n1", "10.0.1.0/24")]);
    let mut d = Driver::with_cloud(deleting_config(), cloud);
    start(&mut d, &[0], &[1]);
    assert_eq!(d.cloud_routes(), vec![pair("n0", "10.0.0.0/24")]);
    let reason = d.sent.iter().find_map(|(_, op)| match op {
        CloudOp::Delete { reason, .. } => Some(reason.as_str()),
        _ => None,
    });
    assert_eq!(reason, Some("node not selected"));
    assert!(!d.conditions.contains_key("n1"));
}

/// Guards the trigger of a label change that unselects a routed node: a pass runs at
/// once (watch mode), and leaves its route; with the flag, deletes it.
#[test]
fn unselecting_a_routed_node_is_a_trigger_that_keeps_or_deletes_its_route() {
    for (config, kept) in [(watch_config(), true), (deleting_config(), false)] {
        let mut d = Driver::new(config);
        start(&mut d, &[0, 1], &[]);
        assert_eq!(d.cloud_routes().len(), 2);
        let writes = d.condition_writes.len();
        let passes = d.passes();
        d.node_event(unselected("n1"));
        d.advance(Duration::from_secs(2));
        assert_eq!(d.passes(), passes + 1, "one pass for the label change");
        let last = d.reports.last().unwrap();
        assert!(
            last.cause.to_string().contains("node n1 unselected"),
            "{last}"
        );
        assert_eq!(
            d.cloud_routes().contains(&pair("n1", "10.0.1.0/24")),
            kept,
            "delete flag {}",
            !kept
        );
        assert_eq!(d.condition_writes.len(), writes, "no condition write");
        assert!(d.events.is_empty());
        // Its later changes are nothing to this controller.
        let passes = d.passes();
        d.node_event(unselected("n1"));
        d.advance(Duration::from_secs(2));
        assert_eq!(
            d.passes(),
            passes,
            "an unselected node's update triggers nothing"
        );
    }
}

/// Guards the trigger of a label change that selects a node: its route appears at
/// once, and its condition is written.
#[test]
fn selecting_a_node_by_a_label_change_creates_its_route_at_once() {
    let mut d = Driver::new(watch_config());
    start(&mut d, &[0], &[1]);
    let passes = d.passes();
    d.node_event(NodeEvent::Modified(bumped(n(1), 2)));
    d.advance(Duration::from_millis(100));
    assert_eq!(d.passes(), passes + 1);
    let last = d.reports.last().unwrap();
    assert!(
        last.cause.to_string().contains("node n1 selected"),
        "{last}"
    );
    assert!(d.cloud_routes().contains(&pair("n1", "10.0.1.0/24")));
    assert_eq!(d.conditions["n1"].status, "False");
}

/// Guards that a deleted unselected node counts as gone: its routes are deleted as any
/// gone node's, flag or not.
#[test]
fn deleting_an_unselected_node_deletes_its_routes() {
    let cloud = cloud_with(&[("n1", "10.0.1.0/24")]);
    let mut d = Driver::with_cloud(watch_config(), cloud);
    start(&mut d, &[0], &[1]);
    assert!(d.cloud_routes().contains(&pair("n1", "10.0.1.0/24")));
    d.node_event(NodeEvent::Deleted(n(1)));
    d.advance(Duration::from_secs(2));
    assert_eq!(d.cloud_routes(), vec![pair("n0", "10.0.0.0/24")]);
    let last = d.reports.last().unwrap();
    assert!(last.cause.to_string().contains("node n1 deleted"), "{last}");
}

/// Guards the relist: a node that turned unselected while the watch was away keeps its
/// route; one that vanished loses it; one that turned selected gets its route.
#[test]
fn a_relist_tells_unselected_from_gone_and_selected() {
    let mut d = Driver::new(watch_config());
    start(&mut d, &[0, 1, 2], &[3]);
    assert_eq!(d.cloud_routes().len(), 3);
    // n1 unselected, n2 gone, n3 selected, while the watch was away.
    start(&mut d, &[0, 3], &[1]);
    d.advance(Duration::from_secs(2));
    assert_eq!(
        d.cloud_routes(),
        vec![
            pair("n0", "10.0.0.0/24"),
            pair("n1", "10.0.1.0/24"),
            pair("n3", "10.0.3.0/24")
        ]
    );
    let cause = d.reports.last().unwrap().cause.to_string();
    for says in ["node n1 unselected", "node n2 deleted", "node n3 selected"] {
        assert!(cause.contains(says), "{says}: {cause}");
    }
}

/// Guards poll mode too: the filter is the watch's, so a poll pass never routes an
/// unselected node nor deletes its route.
#[test]
fn poll_mode_leaves_unselected_nodes_alone_too() {
    let cloud = cloud_with(&[("n1", "10.0.1.0/24")]);
    let mut config = watch_config();
    config.mode = route_controller::Mode::Poll;
    let mut d = Driver::with_cloud(config, cloud);
    start(&mut d, &[0], &[1]);
    d.advance(Duration::from_secs(60));
    assert_eq!(
        d.cloud_routes(),
        vec![pair("n0", "10.0.0.0/24"), pair("n1", "10.0.1.0/24")]
    );
    assert_eq!(d.count("delete"), 0);
    assert!(!d.conditions.contains_key("n1"));
    assert!(d.count("list") >= 6, "poll passes ran");
    assert!(
        !d.commands
            .iter()
            .any(|c| matches!(c, Command::RecordEvent { .. })),
        "no events"
    );
}
