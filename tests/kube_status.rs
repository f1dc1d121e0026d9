//! The status writer against the fake API server: the condition PATCH on the wire,
//! Conflict retries, a node that is gone, and event aggregation.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, node_json};
use route_controller::kube::status::{StatusConfig, StatusWriter, spawn_status_writer};
use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};
use route_controller::metrics::Metrics;
use route_controller::model::Condition;
use route_controller::{NodeEventRecord, StatusRequest, WriteError};

fn client(server: &FakeApiServer) -> Client {
    let config = KubeConfig::load(
        &LoadOptions {
            master: Some(server.url()),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
    .unwrap();
    Client::new(&config, ClientOptions::default()).unwrap()
}

fn no_route() -> Condition {
    Condition {
        status: "True".into(),
        reason: "NoRouteCreated".into(),
        message: "RouteController failed to create a route".into(),
    }
}

fn is_rfc3339_utc(s: &str) -> bool {
    s.len() == 20 && s.ends_with('Z') && s.as_bytes()[10] == b'T'
}

#[test]
fn the_condition_is_a_strategic_merge_patch_of_node_status_through_the_thread() {
    let server = FakeApiServer::start();
    server.put_node(node_json("n1", 3, &["10.244.1.0/24"], "10.0.0.1"));
    let metrics = Arc::new(Metrics::new());
    let (req_tx, req_rx) = crossbeam_channel::unbounded();
    let (reply_tx, reply_rx) = crossbeam_channel::unbounded();
    let thread = spawn_status_writer(
        client(&server),
        StatusConfig::new("cp-1_abc"),
        req_rx,
        reply_tx,
        metrics.clone(),
    )
    .unwrap();
    req_tx
        .send(StatusRequest::WriteCondition {
            node: "n1".into(),
            uid: "uid-n1".into(),
            condition: no_route(),
            cause: Default::default(),
        })
        .unwrap();
    req_tx
        .send(StatusRequest::WriteCondition {
            node: "gone".into(),
            uid: "uid-gone".into(),
            condition: no_route(),
            cause: Default::default(),
        })
        .unwrap();
    let r1 = reply_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let r2 = reply_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(r1, ("n1".to_string(), Ok(())));
    assert_eq!(r2, ("gone".to_string(), Err(WriteError::NodeGone)));
    drop(req_tx);
    thread.join().unwrap();

    let patch = server
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH" && r.path == "/api/v1/nodes/n1/status")
        .expect("a PATCH of n1's status");
    assert_eq!(
        patch.header("content-type"),
        Some("application/strategic-merge-patch+json")
    );
    let body = patch.json();
    let conditions = body["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1);
    let c = &conditions[0];
    assert_eq!(c["type"], "NetworkUnavailable");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "NoRouteCreated");
    assert_eq!(c["message"], "RouteController failed to create a route");
    let t = c["lastTransitionTime"].as_str().unwrap();
    assert!(is_rfc3339_utc(t), "{t}");
    assert_eq!(c["lastHeartbeatTime"], c["lastTransitionTime"]);
    assert_eq!(
        body.as_object().unwrap().len(),
        1,
        "only status is patched: {body}"
    );
    // The fake server merged it by type, keeping the Ready condition.
    let stored = server.node("n1").unwrap();
    assert_eq!(stored["status"]["conditions"].as_array().unwrap().len(), 2);
    assert_eq!(metrics.condition_writes.get(), 1);
    assert_eq!(metrics.condition_write_failures.get(), 0);
}

/// Guards that the single writer thread never waits: a conflict or a 429 is one
/// request answered at once as busy (the controller schedules the retry), a server
/// error one request answered as failed (before, the writer slept between attempts
/// while every other node's write waited).
#[test]
fn conflicts_and_429s_are_answered_at_once_for_the_controller_to_retry() {
    let server = FakeApiServer::start();
    server.put_node(node_json("n1", 3, &["10.244.1.0/24"], "10.0.0.1"));
    let metrics = Arc::new(Metrics::new());
    let mut writer = StatusWriter::new(client(&server), StatusConfig::new("id"), metrics.clone());
    let patches = |s: &FakeApiServer| s.requests().iter().filter(|r| r.method == "PATCH").count();

    server.fail_next("PATCH", "/api/v1/nodes/n1/status", 409, None, 1);
    assert_eq!(
        writer.write_condition("n1", "uid-n1", &no_route()),
        Err(WriteError::Busy { after: None })
    );
    assert_eq!(patches(&server), 1);
    assert_eq!(writer.write_condition("n1", "uid-n1", &no_route()), Ok(()));
    assert_eq!(patches(&server), 2);

    server.fail_next("PATCH", "/api/v1/nodes/n1/status", 429, None, 1);
    assert!(matches!(
        writer.write_condition("n1", "uid-n1", &no_route()),
        Err(WriteError::Busy { after: Some(_) })
    ));
    assert_eq!(patches(&server), 3);

    server.fail_next("PATCH", "/api/v1/nodes/n1/status", 500, None, 1);
    assert!(matches!(
        writer.write_condition("n1", "uid-n1", &no_route()),
        Err(WriteError::Failed(_))
    ));
    assert_eq!(
        patches(&server),
        4,
        "a server error is not retried here; the controller retries"
    );
    assert_eq!(metrics.condition_write_failures.get(), 1);
    assert_eq!(metrics.condition_writes.get(), 1);
}

fn failure(elapsed: &str) -> NodeEventRecord {
    NodeEventRecord {
        node: "n1".into(),
        uid: "uid-n1".into(),
        kind: "Warning",
        reason: "FailedToCreateRoute",
        message: format!(
            "Could not create route uid-n1 10.244.1.0/24 for node n1 after {elapsed}: quota exceeded"
        ),
    }
}

#[test]
fn a_repeated_failure_patches_the_count_of_one_event() {
    let server = FakeApiServer::start();
    let metrics = Arc::new(Metrics::new());
    let mut writer = StatusWriter::new(
        client(&server),
        StatusConfig::new("cp-1_abc"),
        metrics.clone(),
    );
    writer.record_event(&failure("1.2s"));
    writer.record_event(&failure("2m0.5s"));
    let events = server.events();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e["count"], 2);
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "FailedToCreateRoute");
    assert!(e["message"].as_str().unwrap().contains("after 2m0.5s"));
    assert_eq!(e["metadata"]["namespace"], "default");
    assert!(e["metadata"]["name"].as_str().unwrap().starts_with("n1."));
    assert_eq!(
        e["involvedObject"],
        serde_json::json!({"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "uid-n1"})
    );
    assert_eq!(e["source"]["component"], "route_controller");
    assert_eq!(e["reportingComponent"], "route_controller");
    assert_eq!(e["reportingInstance"], "cp-1_abc");
    let requests = server.requests();
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/api/v1/namespaces/default/events");
    assert_eq!(requests[1].method, "PATCH");
    assert_eq!(
        requests[1].path,
        format!(
            "/api/v1/namespaces/default/events/{}",
            e["metadata"]["name"].as_str().unwrap()
        )
    );
    assert_eq!(
        requests[1].header("content-type"),
        Some("application/strategic-merge-patch+json")
    );
    assert_eq!(metrics.events.get(), 2);
}

/// Guards version skew on events (issue 30): a 404 on creating an event (the
/// namespace, or the events API, is not there) turns events off after one warning
/// instead of a 404 for every event; the next events send nothing, and conditions
/// are still written.
#[test]
fn a_404_on_creating_an_event_turns_events_off_once_and_conditions_go_on() {
    let server = FakeApiServer::start();
    server.put_node(node_json("n1", 5, &["10.244.1.0/24"], "10.0.0.1"));
    server.fail_next("POST", "/api/v1/namespaces/default/events", 404, None, 100);
    let metrics = Arc::new(Metrics::new());
    let mut writer = StatusWriter::new(
        client(&server),
        StatusConfig::new("cp-1_abc"),
        metrics.clone(),
    );
    writer.record_event(&failure("1s"));
    assert!(writer.events_off());
    let mut other = failure("2s");
    other.node = "n2".into();
    other.reason = "FailedToDeleteRoute";
    writer.record_event(&other);
    writer.record_event(&failure("3s"));
    let posts = server
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/events"))
        .count();
    assert_eq!(posts, 1, "one POST, then none: {:?}", server.requests());
    assert_eq!(metrics.events.get(), 0);
    writer
        .write_condition("n1", "uid-n1", &no_route())
        .expect("conditions are still written");
    assert_eq!(metrics.condition_writes.get(), 1);
}
