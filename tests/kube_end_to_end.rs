//! Done-when test of the Kubernetes client: the fake API server feeds the watch
//! thread, the watch feeds the controller, and the controller's cloud operations
//! run against the fake cloud. Routes appear for the listed nodes, and a node
//! deleted in the watch loses its route.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, WatchScript, WatchStep, node_json};
use route_controller::cloud::fake::FakeCloud;
use route_controller::kube::watch::{WatchConfig, spawn_node_watch};
use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};
use route_controller::metrics::Metrics;
use route_controller::model::Cidr;
use route_controller::run_op;
use route_controller::{Command, Config, Controller, Input};

/// Runs commands (and the commands their replies cause) to completion.
fn run(
    controller: &mut Controller,
    cloud: &FakeCloud,
    metrics: &Metrics,
    mut commands: Vec<Command>,
) {
    while let Some(command) = commands.pop() {
        let more = match command {
            Command::Cloud { id, op, .. } => {
                let reply = run_op(cloud, "kubernetes", &op, metrics);
                controller.handle(Input::Cloud { id, reply }, Instant::now())
            }
            Command::WriteCondition { node, .. } => controller.handle(
                Input::ConditionWritten {
                    node,
                    result: Ok(()),
                },
                Instant::now(),
            ),
            _ => Vec::new(),
        };
        commands.extend(more);
    }
}

fn destinations(cloud: &FakeCloud) -> Vec<(String, String)> {
    let mut routes: Vec<_> = cloud
        .routes()
        .into_iter()
        .map(|r| (r.target_node, r.destination_cidr))
        .collect();
    routes.sort();
    routes
}

#[test]
fn watched_nodes_get_routes_and_a_node_deleted_in_the_watch_loses_its_route() {
    let server = FakeApiServer::start();
    server.put_node(node_json("n1", 5, &["10.244.1.0/24"], "10.0.0.1"));
    server.put_node(node_json("n2", 6, &["10.244.2.0/24"], "10.0.0.2"));
    let delete_now = Arc::new(AtomicBool::new(false));
    server.script_watch(WatchScript::Stream(vec![
        WatchStep::Event("ADDED", node_json("n3", 11, &["10.244.3.0/24"], "10.0.0.3")),
        WatchStep::WaitFor(delete_now.clone()),
        WatchStep::Event(
            "DELETED",
            node_json("n2", 12, &["10.244.2.0/24"], "10.0.0.2"),
        ),
        WatchStep::Stall,
    ]));

    let kube = KubeConfig::load(
        &LoadOptions {
            master: Some(server.url()),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
    .unwrap();
    let client = Client::new(&kube, ClientOptions::default()).unwrap();
    let metrics = Arc::new(Metrics::new());
    let (tx, rx) = crossbeam_channel::unbounded();
    let watch = spawn_node_watch(&client, WatchConfig::default(), tx, metrics.clone()).unwrap();

    let cloud = FakeCloud::new();
    let mut config = Config::new(vec![Cidr::parse("10.244.0.0/16").unwrap()]);
    config.seed = Some(3);
    let mut controller = Controller::new(config, metrics.clone());

    let all = vec![
        ("n1".to_string(), "10.244.1.0/24".to_string()),
        ("n2".to_string(), "10.244.2.0/24".to_string()),
        ("n3".to_string(), "10.244.3.0/24".to_string()),
    ];
    let without_n2 = vec![all[0].clone(), all[2].clone()];
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut phase = 0;
    while Instant::now() < deadline {
        let wait = controller
            .next_deadline()
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(50))
            .min(Duration::from_millis(50));
        let commands = match rx.recv_timeout(wait) {
            Ok(event) => controller.handle(Input::Node(event), Instant::now()),
            Err(_) => controller.handle(Input::Tick, Instant::now()),
        };
        run(&mut controller, &cloud, &metrics, commands);
        let routes = destinations(&cloud);
        if phase == 0 && routes == all {
            phase = 1;
            delete_now.store(true, Ordering::SeqCst);
        } else if phase == 1 && routes == without_n2 {
            phase = 2;
            break;
        }
    }
    assert_eq!(phase, 2, "routes at the end: {:?}", destinations(&cloud));
    assert!(controller.is_synced());
    assert_eq!(metrics.watch_relists.get(), 1);
    watch.stop();
}
