//! The node watch thread against the fake API server: pagination, resuming, relists
//! after 410, stalls, bad lines, and stopping; streaming lists (watch-list), their
//! fallback to paginated lists, a 410 in their replay and a reconnect after them.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use fake_apiserver::{FakeApiServer, InitialEvents, WatchScript, WatchStep, node_json};
use route_controller::NodeEvent;
use route_controller::kube::watch::{BackoffConfig, NodeWatch, WatchConfig, spawn_node_watch};
use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};
use route_controller::metrics::Metrics;

fn client(server: &FakeApiServer) -> Client {
    let config = KubeConfig::load(
        &LoadOptions {
            master: Some(server.url()),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
    .expect("config from --master");
    Client::new(&config, ClientOptions::default()).expect("client")
}

/// Short timings so that faults resolve in milliseconds; paginated lists (the tests
/// of streaming lists use [`streaming_config`]).
fn fast_config() -> WatchConfig {
    WatchConfig {
        watch_list: false,
        idle_timeout: Duration::from_secs(30),
        backoff: BackoffConfig {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(50),
            reset_after: Duration::from_secs(120),
        },
        seed: Some(1),
        ..WatchConfig::default()
    }
}

fn start(
    server: &FakeApiServer,
    config: WatchConfig,
) -> (NodeWatch, Receiver<NodeEvent>, Arc<Metrics>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let metrics = Arc::new(Metrics::new());
    let watch = spawn_node_watch(&client(server), config, tx, metrics.clone()).expect("spawn");
    (watch, rx, metrics)
}

/// Receives events until `n` have arrived (or fails after 10 s).
fn take(rx: &Receiver<NodeEvent>, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(e) => out.push(describe(&e)),
            Err(_) => panic!("only {} of {n} events arrived: {out:?}", out.len()),
        }
    }
    out
}

fn describe(e: &NodeEvent) -> String {
    match e {
        NodeEvent::Init => "Init".into(),
        NodeEvent::InitApply(n) => format!("InitApply {}", n.name),
        NodeEvent::InitDone => "InitDone".into(),
        NodeEvent::Added(n) => format!("Added {}@{}", n.name, n.resource_version),
        NodeEvent::Modified(n) => format!("Modified {}@{}", n.name, n.resource_version),
        NodeEvent::Deleted(n) => format!("Deleted {}@{}", n.name, n.resource_version),
        NodeEvent::InitUnselected { name, .. } => format!("InitUnselected {name}"),
        NodeEvent::Unselected { name, .. } => format!("Unselected {name}"),
    }
}

fn watch_rvs(server: &FakeApiServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|r| r.is_watch())
        .map(|r| r.query("resourceVersion").unwrap_or("").to_string())
        .collect()
}

fn seed_nodes(server: &FakeApiServer, names: &[&str]) {
    for (i, n) in names.iter().enumerate() {
        server.put_node(node_json(
            n,
            5,
            &[&format!("10.244.{i}.0/24")],
            &format!("10.0.0.{i}"),
        ));
    }
}

#[test]
fn list_follows_continue_tokens_and_never_sends_a_resource_version_with_them() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1", "n2", "n3", "n4", "n5"]);
    let (watch, rx, _) = start(
        &server,
        WatchConfig {
            page_size: 2,
            ..fast_config()
        },
    );
    assert_eq!(
        take(&rx, 7),
        [
            "Init",
            "InitApply n1",
            "InitApply n2",
            "InitApply n3",
            "InitApply n4",
            "InitApply n5",
            "InitDone"
        ]
    );
    let lists: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_list())
        .collect();
    assert_eq!(lists.len(), 3);
    for (i, l) in lists.iter().enumerate() {
        assert_eq!(l.query("limit"), Some("2"));
        assert_eq!(
            l.query("resourceVersion"),
            None,
            "list {i} must not carry a resourceVersion"
        );
        assert_eq!(l.header("accept"), Some("application/json"));
        assert!(
            l.header("user-agent")
                .unwrap_or("")
                .starts_with("route-controller/")
        );
    }
    assert_eq!(lists[0].query("continue"), None);
    assert_eq!(lists[1].query("continue"), Some("page-2"));
    assert_eq!(lists[2].query("continue"), Some("page-4"));
    // The watch starts from the list's resourceVersion with bookmarks and a server timeout.
    assert!(server.wait_for(Duration::from_secs(5), |r| r.iter().any(|r| r.is_watch())));
    let w = server
        .requests()
        .into_iter()
        .find(|r| r.is_watch())
        .unwrap();
    assert_eq!(w.query("resourceVersion"), Some("10"));
    assert_eq!(w.query("allowWatchBookmarks"), Some("true"));
    let timeout: u64 = w.query("timeoutSeconds").unwrap().parse().unwrap();
    assert!((300..600).contains(&timeout), "{timeout}");
    watch.stop();
}

#[test]
fn an_expired_continue_token_restarts_the_list_with_init() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1", "n2", "n3"]);
    server.expire_continue_tokens(1);
    let (watch, rx, _) = start(
        &server,
        WatchConfig {
            page_size: 2,
            ..fast_config()
        },
    );
    assert_eq!(
        take(&rx, 8),
        [
            "Init",
            "InitApply n1",
            "InitApply n2",
            "Init",
            "InitApply n1",
            "InitApply n2",
            "InitApply n3",
            "InitDone"
        ]
    );
    watch.stop();
}

#[test]
fn a_clean_watch_end_resumes_at_the_last_resource_version_without_relisting() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n2", 11, &["10.244.9.0/24"], "10.0.0.9")),
        WatchStep::Bookmark("15".into()),
        WatchStep::End,
    ]));
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event(
            "MODIFIED",
            node_json("n2", 16, &["10.244.9.0/24"], "10.0.0.9"),
        ),
        WatchStep::Stall,
    ]));
    let (watch, rx, metrics) = start(&server, fast_config());
    assert_eq!(
        take(&rx, 5),
        [
            "Init",
            "InitApply n1",
            "InitDone",
            "Added n2@11",
            "Modified n2@16"
        ]
    );
    assert_eq!(watch_rvs(&server), ["10", "15"]);
    assert_eq!(server.requests().iter().filter(|r| r.is_list()).count(), 1);
    assert_eq!(
        metrics.watch_restarts.get(),
        0,
        "a clean end is not a restart"
    );
    assert_eq!(metrics.watch_healthy.get(), 1);
    watch.stop();
    assert_eq!(metrics.watch_healthy.get(), 0);
}

#[test]
fn relist_after_410_as_http_status_and_as_error_event_emits_init_again() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1", "n2"]);
    let vanished = Arc::new(AtomicBool::new(false));
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event(
            "MODIFIED",
            node_json("n1", 20, &["10.244.0.0/24"], "10.0.0.0"),
        ),
        WatchStep::WaitFor(vanished.clone()),
        WatchStep::Expired,
    ]));
    server.script_watch(WatchScript::Status(410, "Expired"));
    let (watch, rx, metrics) = start(&server, fast_config());
    assert_eq!(
        take(&rx, 5),
        [
            "Init",
            "InitApply n1",
            "InitApply n2",
            "InitDone",
            "Modified n1@20"
        ]
    );
    // n2 is deleted while the watch is away; the relist simply no longer lists it.
    server.remove_node("n2");
    vanished.store(true, Ordering::SeqCst);
    // The ERROR event relists; the next watch answers HTTP 410 and relists again.
    assert_eq!(take(&rx, 3), ["Init", "InitApply n1", "InitDone"]);
    assert_eq!(take(&rx, 3), ["Init", "InitApply n1", "InitDone"]);
    assert_eq!(server.requests().iter().filter(|r| r.is_list()).count(), 3);
    assert_eq!(metrics.watch_restarts.get(), 2);
    watch.stop();
}

#[test]
fn a_stalled_watch_is_detected_by_the_idle_timeout_and_resumed() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Bookmark("12".into()),
        WatchStep::Stall,
    ]));
    let config = WatchConfig {
        idle_timeout: Duration::from_millis(300),
        ..fast_config()
    };
    // Timed from before the start: the idle timer cannot run out sooner than its
    // 300 ms after that, however late this thread is scheduled (timed from the events'
    // arrival, a loaded machine could make the wait look shorter than it was).
    let started = Instant::now();
    let (watch, rx, metrics) = start(&server, config);
    take(&rx, 3);
    assert!(server.wait_for(
        Duration::from_secs(5),
        |r| r.iter().filter(|r| r.is_watch()).count() >= 2
    ));
    let resumed = started.elapsed();
    println!("the stalled watch was resumed {resumed:?} after the start");
    assert!(resumed >= Duration::from_millis(300), "{resumed:?}");
    assert_eq!(watch_rvs(&server)[..2], ["10", "12"]);
    assert_eq!(
        server.requests().iter().filter(|r| r.is_list()).count(),
        1,
        "no relist"
    );
    assert!(metrics.watch_restarts.get() >= 1);
    watch.stop();
}

#[test]
fn garbage_cut_and_oversized_lines_restart_the_stream_without_losing_events() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n2", 11, &[], "10.0.0.2")),
        WatchStep::Line("this is not json".into()),
        WatchStep::Event("ADDED", node_json("lost", 99, &[], "10.0.0.99")),
    ]));
    server.script_watch(WatchScript::Stream(vec![WatchStep::Line(format!(
        "{{\"type\":\"ADDED\",\"object\":{{\"padding\":\"{}\"}}}}",
        "x".repeat(4096)
    ))]));
    server.script_watch(WatchScript::Stream(vec![WatchStep::Line(
        r#"{"type":"SURPRISE","object":{}}"#.into(),
    )]));
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n3", 12, &[], "10.0.0.3")),
        WatchStep::Raw(br#"{"type":"ADDED","object":{"metad"#.to_vec()),
        WatchStep::Drop,
    ]));
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("DELETED", node_json("n2", 13, &[], "10.0.0.2")),
        // A last good event: whatever comes between it and the one before is extra.
        WatchStep::Event("ADDED", node_json("n4", 14, &[], "10.0.0.4")),
        WatchStep::Stall,
    ]));
    let config = WatchConfig {
        max_line: 2048,
        ..fast_config()
    };
    let (watch, rx, metrics) = start(&server, config);
    assert_eq!(
        take(&rx, 7),
        [
            "Init",
            "InitApply n1",
            "InitDone",
            "Added n2@11",
            "Added n3@12",
            "Deleted n2@13",
            "Added n4@14"
        ]
    );
    // Each bad stream was resumed from the last good version; nothing after a bad line
    // was taken from the broken stream.
    assert_eq!(watch_rvs(&server), ["10", "11", "11", "11", "12"]);
    assert_eq!(metrics.watch_restarts.get(), 4);
    watch.stop();
}

/// Backoff slow enough that "waited" and "did not wait" are far apart on any machine:
/// 100 ms doubling to 400 ms, ±25 %.
fn measurable_backoff() -> WatchConfig {
    WatchConfig {
        backoff: BackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(400),
            reset_after: Duration::from_secs(120),
        },
        ..fast_config()
    }
}

/// The gaps between consecutive requests that match `pred`, in order.
fn request_gaps(
    server: &FakeApiServer,
    pred: impl Fn(&fake_apiserver::Recorded) -> bool,
) -> Vec<Duration> {
    let times: Vec<Instant> = server
        .requests()
        .iter()
        .filter(|r| pred(r))
        .map(|r| r.at)
        .collect();
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

/// Kills: a list retried without waiting (the `fail` of `on_list_page`'s error path).
/// Three failed lists are retried after at least 75, 150 and 300 ms (100 ms doubling,
/// jittered by at most -25 %); only lower bounds, since a loaded machine only adds.
#[test]
fn server_errors_on_the_list_are_retried_with_growing_backoff() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    server.fail_next("GET", "/api/v1/nodes", 500, None, 2);
    server.fail_next("GET", "/api/v1/nodes", 429, Some(0), 1);
    let (watch, rx, _) = start(&server, measurable_backoff());
    assert_eq!(take(&rx, 3), ["Init", "InitApply n1", "InitDone"]);
    let gaps = request_gaps(&server, |r| r.is_list());
    println!("list retries after {gaps:?}");
    assert_eq!(
        gaps.len(),
        3,
        "three failures, then the list that worked: {gaps:?}"
    );
    for (gap, least) in gaps.iter().zip([75, 150, 300]) {
        assert!(*gap >= Duration::from_millis(least), "{gaps:?}");
    }
    watch.stop();
}

/// Kills: a watch retried without waiting (the `fail` of `on_watch_started`'s error
/// path), or relisted instead of resumed. Three watches refused with 500 are retried
/// from the same resourceVersion after at least 75, 150 and 300 ms, with no new list.
#[test]
fn server_errors_on_the_watch_are_retried_with_growing_backoff_and_no_relist() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    for _ in 0..3 {
        server.script_watch(WatchScript::Status(500, "InternalError"));
    }
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n2", 11, &["10.244.9.0/24"], "10.0.0.9")),
        WatchStep::Stall,
    ]));
    let (watch, rx, _) = start(&server, measurable_backoff());
    assert_eq!(
        take(&rx, 4),
        ["Init", "InitApply n1", "InitDone", "Added n2@11"]
    );
    let gaps = request_gaps(&server, |r| r.is_watch());
    println!("watch retries after {gaps:?}");
    assert_eq!(
        gaps.len(),
        3,
        "three refused watches, then the one that worked: {gaps:?}"
    );
    for (gap, least) in gaps.iter().zip([75, 150, 300]) {
        assert!(*gap >= Duration::from_millis(least), "{gaps:?}");
    }
    assert_eq!(watch_rvs(&server), ["10", "10", "10", "10"]);
    assert_eq!(server.requests().iter().filter(|r| r.is_list()).count(), 1);
    watch.stop();
}

/// Kills: a stop that only sets its flag (dropping `agent.shutdown()` from
/// `StopHandle::stop`): the read blocked on the stalled stream then waits for the 60 s
/// idle timeout.
#[test]
fn stop_interrupts_a_blocked_watch_promptly() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    let config = WatchConfig {
        idle_timeout: Duration::from_secs(60),
        ..fast_config()
    };
    // The watch delivers one event and then stalls: once that event is out, the thread
    // is certainly blocked reading the stalled stream (no sleep to guess when).
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n2", 11, &["10.244.9.0/24"], "10.0.0.9")),
        WatchStep::Stall,
    ]));
    let (watch, rx, _) = start(&server, config);
    assert_eq!(take(&rx, 4)[3], "Added n2@11");
    let started = Instant::now();
    watch.stop();
    // Wall clock (a real thread): wide of the idle timeout's 60 s it guards against,
    // and printed.
    let took = started.elapsed();
    println!("the blocked watch stopped {took:?} after it was told to");
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

// --- streaming lists (watch-list) --------------------------------------------------

fn streaming_config() -> WatchConfig {
    WatchConfig {
        watch_list: true,
        ..fast_config()
    }
}

fn count(server: &FakeApiServer, pred: impl Fn(&fake_apiserver::Recorded) -> bool) -> usize {
    server.requests().iter().filter(|r| pred(r)).count()
}

/// Guards the streaming list end to end: one request replays the nodes, framed as a
/// list, and goes on as the watch; no LIST at all; the reconnect after a clean end
/// is a plain watch from the last version, without `sendInitialEvents` (kube-rs
/// #1844); the streaming list is counted.
#[test]
fn a_streaming_list_replays_the_nodes_then_goes_on_as_the_watch_without_any_list() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1", "n2"]);
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n3", 11, &["10.244.9.0/24"], "10.0.0.9")),
        WatchStep::Bookmark("15".into()),
        WatchStep::End,
    ]));
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event(
            "MODIFIED",
            node_json("n3", 16, &["10.244.9.0/24"], "10.0.0.9"),
        ),
        WatchStep::Stall,
    ]));
    let (watch, rx, metrics) = start(&server, streaming_config());
    assert_eq!(
        take(&rx, 6),
        [
            "Init",
            "InitApply n1",
            "InitApply n2",
            "InitDone",
            "Added n3@11",
            "Modified n3@16"
        ]
    );
    let watches: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_watch())
        .collect();
    assert_eq!(watches.len(), 2);
    let first = &watches[0];
    assert!(first.is_watch_list());
    assert_eq!(first.query("resourceVersionMatch"), Some("NotOlderThan"));
    assert_eq!(first.query("allowWatchBookmarks"), Some("true"));
    assert_eq!(
        first.query("resourceVersion"),
        None,
        "a consistent snapshot"
    );
    assert!(
        !watches[1].is_watch_list(),
        "the reconnect resent sendInitialEvents"
    );
    assert_eq!(watches[1].query("sendInitialEvents"), None);
    assert_eq!(watches[1].query("resourceVersion"), Some("15"));
    assert_eq!(count(&server, |r| r.is_list()), 0);
    assert_eq!(metrics.watch_streaming_lists.get(), 1);
    assert_eq!(metrics.watch_list_fallbacks.get(), 0);
    assert_eq!(metrics.watch_restarts.get(), 0);
    watch.stop();
}

/// Guards the fallback on refusal (a 422 as from a server with the WatchList gate
/// off): the nodes come by a paginated list, and the relist after a 410 is a list
/// too, with no second streaming list (no flapping).
#[test]
fn a_refused_streaming_list_falls_back_to_paginated_lists_for_good() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1"]);
    server.set_initial_events(InitialEvents::Refuse(422));
    server.script_watch(WatchScript::Stream(vec![WatchStep::Expired]));
    let (watch, rx, metrics) = start(&server, streaming_config());
    assert_eq!(
        take(&rx, 6),
        [
            "Init",
            "InitApply n1",
            "InitDone",
            "Init",
            "InitApply n1",
            "InitDone"
        ]
    );
    assert_eq!(count(&server, |r| r.is_watch_list()), 1);
    assert_eq!(count(&server, |r| r.is_list()), 2);
    assert_eq!(metrics.watch_streaming_lists.get(), 0);
    assert_eq!(metrics.watch_list_fallbacks.get(), 1, "counted once");
    watch.stop();
}

/// Guards the deadline on a server that ignores `sendInitialEvents` (it replays the
/// nodes and never ends the initial events): once `initial_events_timeout` has passed
/// after the last node (seen here at the next bookmark), the partial view is dropped
/// by a new `Init` of a paginated list, and the watch goes on from that list's version.
#[test]
fn a_server_that_never_sends_the_end_bookmark_is_listed_after_the_deadline() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1", "n2"]);
    server.set_initial_events(InitialEvents::NoEndBookmark);
    let deadline = Duration::from_millis(300);
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Pause(Duration::from_millis(400)),
        WatchStep::Bookmark("12".into()),
        WatchStep::Stall,
    ]));
    let config = WatchConfig {
        initial_events_timeout: deadline,
        ..streaming_config()
    };
    let started = Instant::now();
    let (watch, rx, metrics) = start(&server, config);
    assert_eq!(take(&rx, 3), ["Init", "InitApply n1", "InitApply n2"]);
    assert_eq!(
        take(&rx, 4),
        ["Init", "InitApply n1", "InitApply n2", "InitDone"]
    );
    assert!(started.elapsed() >= deadline, "{:?}", started.elapsed());
    assert!(server.wait_for(Duration::from_secs(5), |r| {
        r.iter().filter(|r| r.is_watch()).count() >= 2
    }));
    assert_eq!(count(&server, |r| r.is_watch_list()), 1);
    assert_eq!(count(&server, |r| r.is_list()), 1);
    assert_eq!(watch_rvs(&server), ["", "10"]);
    assert_eq!(metrics.watch_list_fallbacks.get(), 1);
    watch.stop();
}

/// Guards the 410 in the middle of the replay: the partial view (n1) is dropped by
/// the `Init` of the next try, which is a streaming list again from a consistent
/// snapshot, and only the complete one ends with `InitDone`.
#[test]
fn a_410_in_the_middle_of_the_replay_streams_the_list_again() {
    let server = FakeApiServer::start();
    seed_nodes(&server, &["n1", "n2", "n3"]);
    server.script_initial_events(InitialEvents::ExpireAfter(1));
    let (watch, rx, metrics) = start(&server, streaming_config());
    assert_eq!(
        take(&rx, 7),
        [
            "Init",
            "InitApply n1",
            "Init",
            "InitApply n1",
            "InitApply n2",
            "InitApply n3",
            "InitDone"
        ]
    );
    let lists: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.is_watch_list())
        .collect();
    assert_eq!(lists.len(), 2);
    assert!(lists.iter().all(|r| r.query("resourceVersion").is_none()));
    assert_eq!(count(&server, |r| r.is_list()), 0);
    assert_eq!(metrics.watch_streaming_lists.get(), 1);
    watch.stop();
}
