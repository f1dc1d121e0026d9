//! The actor loop with real channels and threads: messages injected on its input
//! channels come out as cloud jobs, status requests and pass reports.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use route_controller::StatusRequest;
use route_controller::actor::{self, ActorIo, Exit};
use route_controller::cloud::fake::FakeCloud;
use route_controller::metrics::Metrics;
use route_controller::model::{Cidr, Node, NodeAddress};
use route_controller::workers;
use route_controller::{Config, Controller, Fence, NodeEvent, PassReport};

struct Running {
    nodes: Sender<NodeEvent>,
    leadership: Sender<bool>,
    shutdown: Sender<()>,
    reports: Receiver<PassReport>,
    status: Receiver<StatusRequest>,
    cloud: Arc<FakeCloud>,
    fence: Fence,
    actor: thread::JoinHandle<Exit>,
}

fn start(leader_election: bool) -> Running {
    let mut config = Config::new(vec![Cidr::parse("10.0.0.0/16").unwrap()]);
    config.leader_election = leader_election;
    config.seed = Some(5);
    let metrics = Arc::new(Metrics::new());
    let cloud = Arc::new(FakeCloud::new());
    let (nodes_tx, nodes) = unbounded();
    let (leadership_tx, leadership) = unbounded();
    let (shutdown_tx, shutdown) = bounded(1);
    let (jobs_tx, jobs) = unbounded();
    let (replies_tx, cloud_replies) = unbounded();
    let (status_tx, status_rx) = unbounded();
    let (status_replies_tx, status_replies) = unbounded();
    let (reports_tx, reports) = unbounded();
    let fence = if leader_election {
        Fence::new()
    } else {
        Fence::open()
    };
    workers::spawn(
        cloud.clone(),
        fence.clone(),
        "kubernetes".into(),
        2,
        jobs,
        replies_tx,
        metrics.clone(),
    )
    .unwrap();
    // A status writer that accepts every write.
    let (status_seen_tx, status_seen) = unbounded();
    thread::spawn(move || {
        for req in status_rx.iter() {
            if let StatusRequest::WriteCondition { node, .. } = &req {
                let _ = status_replies_tx.send((node.clone(), Ok(())));
            }
            let _ = status_seen_tx.send(req);
        }
    });
    let controller = Controller::new(config, metrics);
    let io = ActorIo {
        nodes,
        cloud_replies,
        status_replies,
        leadership,
        shutdown,
        fence: fence.clone(),
        cloud_jobs: jobs_tx,
        status_requests: status_tx,
        reports: Some(reports_tx),
    };
    let actor = thread::spawn(move || actor::run(controller, io));
    Running {
        nodes: nodes_tx,
        leadership: leadership_tx,
        shutdown: shutdown_tx,
        reports,
        status: status_seen,
        cloud,
        fence,
        actor,
    }
}

fn node(name: &str, cidr: &str) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        resource_version: "1".into(),
        pod_cidrs: vec![cidr.into()],
        addresses: vec![NodeAddress::internal_ip("192.168.0.1")],
        ..Node::default()
    }
}

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn node_events_on_the_channel_become_routes_conditions_and_reports() {
    let r = start(false);
    r.nodes.send(NodeEvent::Init).unwrap();
    r.nodes
        .send(NodeEvent::InitApply(node("a", "10.0.1.0/24")))
        .unwrap();
    r.nodes.send(NodeEvent::InitDone).unwrap();
    let first = r.reports.recv_timeout(WAIT).expect("a startup pass report");
    assert_eq!((first.created, first.listed), (1, true), "{first}");
    r.nodes
        .send(NodeEvent::Added(node("b", "10.0.2.0/24")))
        .unwrap();
    let second = r.reports.recv_timeout(WAIT).expect("a pass for node b");
    assert!(second.to_string().contains("node b added"), "{second}");
    let mut routes: Vec<String> = r
        .cloud
        .routes()
        .into_iter()
        .map(|r| r.target_node)
        .collect();
    routes.sort();
    assert_eq!(routes, vec!["a", "b"]);
    // The requests pass through the status writer's thread, which may still hold
    // b's when its pass report arrives: wait for it.
    let mut writes: Vec<StatusRequest> = Vec::new();
    while writes.len() < 2 {
        match r.status.recv_timeout(WAIT) {
            Ok(w) => writes.push(w),
            Err(_) => break,
        }
    }
    writes.extend(r.status.try_iter());
    assert_eq!(writes.len(), 2, "{writes:?}");
    r.shutdown.send(()).unwrap();
    assert_eq!(r.actor.join().unwrap(), Exit::Shutdown);
}

#[test]
fn losing_the_lease_ends_the_actor_with_lost_leadership() {
    let r = start(true);
    r.nodes.send(NodeEvent::Init).unwrap();
    r.nodes.send(NodeEvent::InitDone).unwrap();
    // As leader election does: the fence opens before the gain is reported.
    r.fence.open_for_good();
    r.leadership.send(true).unwrap();
    r.reports
        .recv_timeout(WAIT)
        .expect("the new leader runs a pass");
    r.leadership.send(false).unwrap();
    assert_eq!(r.actor.join().unwrap(), Exit::LostLeadership);
}

/// Guards the actor's watch on the fence: a renew deadline that passes while the
/// lease thread is silent (stuck in a renewal) ends the actor as a loss would, with
/// no message on the leadership channel. Without the watch the actor would wait for
/// that message and this test would time out.
#[test]
fn a_renew_deadline_that_passes_unrenewed_ends_the_actor_with_lost_leadership() {
    let r = start(true);
    r.nodes.send(NodeEvent::Init).unwrap();
    r.nodes.send(NodeEvent::InitDone).unwrap();
    let opened = std::time::Instant::now();
    r.fence
        .open_until(opened + Duration::from_millis(300), opened);
    r.leadership.send(true).unwrap();
    r.reports
        .recv_timeout(WAIT)
        .expect("the new leader runs a pass");
    let (done_tx, done) = bounded(1);
    thread::spawn(move || {
        let _ = done_tx.send(r.actor.join().unwrap());
    });
    let exit = done
        .recv_timeout(WAIT)
        .expect("the actor ends without a leadership message");
    let took = opened.elapsed();
    println!("actor ended {took:?} after the fence opened for 300ms");
    assert_eq!(exit, Exit::LostLeadership);
    assert!(took >= Duration::from_millis(300), "{took:?}");
    drop(r.leadership);
}

#[test]
fn the_actor_exits_when_the_watch_goes_away() {
    let r = start(false);
    drop(r.nodes);
    assert_eq!(r.actor.join().unwrap(), Exit::WatchEnded);
}
