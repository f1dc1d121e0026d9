//! A small, blocking Kubernetes client: just what the route controller needs.
//!
//! - [`config`]: where the cluster and the credentials are (kubeconfig, in-cluster).
//! - [`client`]: HTTP on ureq with `Status` decoding, write rate limiting, TLS checks.
//! - [`watch`]: the node reflector thread (list, watch, relist) feeding the controller.
//! - [`status`]: the thread that writes node conditions and records events.
//! - [`lease`]: leader election on a coordination.k8s.io/v1 Lease.
//! - [`review`]: TokenReview and SubjectAccessReview, for the secure metrics port.
//! - [`discovery`]: the start-up check that the API server serves the APIs a run needs.
//!
//! The decision logic of each thread (watch states and backoff, event aggregation,
//! leader election) is a sans-IO struct fed with the time; the threads are thin
//! drivers. Nothing here holds a copy of the nodes: the controller owns that view.

#[doc(hidden)]
pub mod auth;
#[doc(hidden)]
pub mod client;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod discovery;
#[doc(hidden)]
pub mod env;
#[doc(hidden)]
pub mod error;
#[doc(hidden)]
pub mod lease;
/// The node watch in Kubernetes' protobuf encoding.
pub mod protobuf;
#[doc(hidden)]
pub mod review;
#[doc(hidden)]
pub mod status;
#[doc(hidden)]
pub mod stop;
#[doc(hidden)]
pub mod watch;

pub use client::{Client, ClientOptions, Method};
pub use config::{ConfigError, KubeConfig, LoadOptions};
pub use env::Env;
pub use error::{ApiError, ApiErrorKind, KubeError};
pub use lease::{LeaseConfig, default_identity, spawn_leader_election};
pub use status::{StatusConfig, spawn_status_writer};
pub use stop::StopHandle;
pub use watch::{NodeWatch, WatchConfig, for_each_node, list_nodes, spawn_node_watch};
