//! route-controller keeps a cloud's route table in step with a Kubernetes cluster's
//! nodes: every node's pod CIDRs are routed to that node. It re-implements the route
//! controller of the cloud-controller-manager (`k8s.io/cloud-provider`), including the
//! watch-based reconciliation of KEP-5237, without an async runtime.
//!
//! The pieces:
//! - [`model`]: nodes as the controller sees them, cloud routes, parsed CIDRs.
//! - [`plan`]: the pure planner (nodes + routes + cluster CIDRs → deletes, creates,
//!   conditions), with upstream's semantics.
//! - [`controller`]: the sans-IO state machine that decides when to plan, what to send
//!   and how to retry. It is fed inputs and the time and returns commands.
//! - [`actor`]: the thread that connects the controller to channels.
//! - [`cloud`]: the provider interface, the worker pool, rate limiting, providers.
//! - [`metrics`]: the registry exported in the Prometheus text format.
//!
//! # Driving the controller by hand
//!
//! The controller does no IO. A test, a simulation or an embedding tool feeds it node
//! events and replies, with whatever clock it likes, and carries out its commands:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use route_controller::cloud::{Routes, fake::FakeCloud};
//! use route_controller::controller::{CloudOp, CloudReply, Command, Config, Controller, Input, NodeEvent};
//! use route_controller::metrics::Metrics;
//! use route_controller::model::{Cidr, Node, NodeAddress};
//!
//! let config = Config::new(vec![Cidr::parse("10.244.0.0/16").unwrap()]);
//! let mut controller = Controller::new(config, Arc::new(Metrics::new()));
//! let cloud = FakeCloud::new();
//! let node = Node {
//!     name: "worker-1".into(),
//!     uid: "8a4b2f10".into(),
//!     pod_cidrs: vec!["10.244.1.0/24".into()],
//!     addresses: vec![NodeAddress::internal_ip("10.0.0.3")],
//!     ..Node::default()
//! };
//!
//! // The node watch delivers a complete list: a pass starts and lists the routes.
//! let mut now = Instant::now();
//! let mut pending = Vec::new();
//! for event in [NodeEvent::Init, NodeEvent::InitApply(node), NodeEvent::InitDone] {
//!     pending.extend(controller.handle(Input::Node(event), now));
//! }
//!
//! // Carry out cloud commands and feed the replies back until nothing is left.
//! while let Some(command) = pending.pop() {
//!     now += Duration::from_millis(100);
//!     if let Command::Cloud { id, op, cause } = command {
//!         println!("pass {} ({cause}): {op:?}", cause.pass);
//!         let reply = match &op {
//!             CloudOp::List { nodes } => CloudReply::Listed(cloud.list_routes("kubernetes", nodes)),
//!             CloudOp::Create { route, name_hint, target } => {
//!                 CloudReply::Done(cloud.create_route("kubernetes", name_hint, route, target))
//!             }
//!             CloudOp::Delete { route, .. } => CloudReply::Done(cloud.delete_route("kubernetes", route)),
//!         };
//!         pending.extend(controller.handle(Input::Cloud { id, reply }, now));
//!     }
//! }
//! assert_eq!(cloud.routes()[0].target_node, "worker-1");
//! // Nothing to do until the resync, 12 to 24 hours from now.
//! assert!(controller.next_deadline().unwrap() > now + Duration::from_secs(12 * 3600 - 1));
//! ```
#![forbid(unsafe_code)]

pub mod actor;
pub mod cli;
pub mod cloud;
pub mod config;
pub mod controller;
pub mod duration;
pub mod kube;
pub mod logging;
pub mod manifests;
pub mod metrics;
pub mod model;
pub mod plan;
pub mod run;
pub mod secret;
pub mod serve;
pub mod sim;
