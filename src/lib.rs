//! route-controller keeps a cloud's route table in step with a Kubernetes cluster's
//! nodes: every node's pod CIDRs are routed to that node. It re-implements the route
//! controller of the cloud-controller-manager (`k8s.io/cloud-provider`), including the
//! watch-based reconciliation of KEP-5237, without an async runtime.
//!
//! What an embedder uses, all at the crate root:
//! - [`Controller`], fed [`Input`]s and the time, returning [`Command`]s: the sans-IO
//!   state machine that decides when to plan, what to send and how to retry; with its
//!   [`Config`], and the [`NodeEvent`]s, [`CloudOp`]s and [`PassReport`]s it speaks in.
//! - [`Builder`] and [`Handle`]: the same threads as the binary (node watch, lease,
//!   reconcile actor, cloud workers, status writer), for a tool that wants it all.
//! - [`Routes`]: the provider interface, with [`CloudError`] and its
//!   [`CloudErrorKind`]s; the providers themselves are in [`cloud`]. The [`Fence`]
//!   they check before every request is opened and closed by leader election.
//! - [`Metrics`]: the registry exported in the Prometheus text format ([`metrics`]).
//! - The model ([`Node`], [`Route`], [`Cidr`], …, in [`model`]) and the pure planner
//!   ([`plan`]), with upstream's semantics.
//! - [`kube`]: the small blocking Kubernetes client the threads use.
//!
//! Modules marked hidden in the source (`cli`, `serve`, `sim`, …) are the binary's and
//! the tests' and are not part of the API.
//!
//! # Driving the controller by hand
//!
//! The controller does no IO. A test, a simulation or an embedding tool feeds it node
//! events and replies, with whatever clock it likes, and carries out its commands:
//!
//! ```
//! use std::sync::Arc;
//! use std::time::{Duration, Instant};
//! use route_controller::cloud::fake::FakeCloud;
//! use route_controller::{Cidr, CloudOp, CloudReply, Command, Config, Controller, Input};
//! use route_controller::{Metrics, Node, NodeAddress, NodeEvent, RouteList, Routes};
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
//!             CloudOp::List { nodes } => {
//!                 let routes = cloud.list_routes("kubernetes", nodes);
//!                 CloudReply::Listed(routes.map(RouteList::from))
//!             }
//!             CloudOp::Create { route, name_hint, target } => {
//!                 CloudReply::Done(cloud.create_route("kubernetes", name_hint, route, target))
//!             }
//!             CloudOp::Delete { route, .. } => CloudReply::Done(cloud.delete_route("kubernetes", route)),
//!             // Operations may be added (the enum is non-exhaustive); `run_op` knows
//!             // every one and is what the binary's cloud workers call.
//!             other => route_controller::run_op(&cloud, "kubernetes", other, controller.metrics()),
//!         };
//!         pending.extend(controller.handle(Input::Cloud { id, reply }, now));
//!     }
//! }
//! assert_eq!(cloud.routes()[0].target_node, "worker-1");
//! // Nothing to do until the resync, 12 to 24 hours from now.
//! assert!(controller.next_deadline().unwrap() > now + Duration::from_secs(12 * 3600 - 1));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The core: decisions, the model, the provider interface. Leaves below it.
mod backoff;
mod config;
mod controller;
mod credentials;
mod duration;
mod fence;
mod http;
pub mod metrics;
pub mod model;
pub mod node_filter;
mod percent;
pub mod plan;
mod process_group;
mod provider;
mod ratelimit;
mod secret;
pub mod selector;
mod signing;
pub(crate) mod spelling;
mod sync;

// Drivers around the core, and the providers.
pub mod cloud;
pub mod kube;
mod run;

// Reachable for the binary, the benchmarks and the integration tests only: not part of
// the API, no stability promise, absent from the documentation.
#[doc(hidden)]
pub mod actor;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod logging;
#[doc(hidden)]
pub mod manifests;
#[doc(hidden)]
pub mod serve;
#[doc(hidden)]
pub mod sim;
#[doc(hidden)]
pub mod workers;

pub use actor::Exit;
pub use controller::{
    Cause, CloudJob, CloudOp, CloudReply, Command, Config, Controller, Input, Mode, NodeEvent,
    NodeEventRecord, OpId, PassReport, RouteList, StatusRequest, Trigger, WriteError,
};
pub use fence::Fence;
pub use http::{ProxyEnv, ProxyError, Proxying, SystemStore, Trust, TrustError};
pub use metrics::{CloudOperation, CloudOutcome, Metrics, SyncOutcome, TriggerKind};
pub use model::{Cidr, Condition, Node, NodeAddress, Route};
pub use provider::{
    Bucket, Budget, BudgetOp, CloudError, CloudErrorKind, Meter, NodeDirectory, ROUTE_TABLE_FULL,
    RouteChange, RouteTarget, Routes, TableUsage, Usage,
};
pub use run::{Builder, Handle, Servers, Serving, Stopper};
pub use workers::{run_op, run_op_metered};

#[cfg(test)]
mod fuzz;
