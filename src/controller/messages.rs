//! Everything that goes into the controller and comes out of it: the [`Input`]s its
//! drivers feed it, the [`Command`]s it returns, and the jobs the actor forwards to
//! the cloud workers and the status writer, whole, with the [`Cause`] that explains
//! them. The one home of the messages between the core and its drivers.

use std::sync::Arc;
use std::time::Duration;

use super::Cause;
use super::report::PassReport;
use crate::model::{Condition, Node, Route};
use crate::node_filter::Unselected;
use crate::plan::DeleteReason;
use crate::provider::{CloudError, NodeDirectory, RouteChange, RouteTarget, TableUsage, Usage};

/// An event from the node watch, with the relist markers of kube-rs's watcher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeEvent {
    /// A (re)list begins; the nodes that follow replace the whole view at `InitDone`.
    Init,
    /// One node of the list.
    InitApply(Node),
    /// One node of the list that this controller does not route (see
    /// [`NodeFilter`](crate::node_filter::NodeFilter)): its name, its providerID (for
    /// the provider to tell its routes from routes to nobody) and why. Its routes are
    /// left alone, unless the controller is told to delete them.
    InitUnselected {
        /// The node's name.
        name: String,
        /// Its `spec.providerID`.
        provider_id: Option<String>,
        /// Why it is not routed.
        why: Unselected,
    },
    /// The list is complete; the view is whole again.
    InitDone,
    /// A node appeared.
    Added(Node),
    /// A node changed.
    Modified(Node),
    /// A node appeared or changed, and this controller does not route it (see
    /// [`NodeEvent::InitUnselected`]).
    Unselected {
        /// The node's name.
        name: String,
        /// Its `spec.providerID`.
        provider_id: Option<String>,
        /// Why it is not routed.
        why: Unselected,
    },
    /// A node disappeared (the last state the watch saw), whether routed or not.
    Deleted(Node),
}

/// Identifies a cloud operation between its command and its reply.
pub type OpId = u64;

/// What the controller is told.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Input {
    /// An event of the node watch.
    Node(NodeEvent),
    /// The reply to [`Command::Cloud`] with the same id.
    Cloud {
        /// The operation's id.
        id: OpId,
        /// What the provider answered.
        reply: CloudReply,
    },
    /// The reply to [`Command::WriteCondition`] for `node`.
    ConditionWritten {
        /// The node written.
        node: String,
        /// Whether the write succeeded.
        result: Result<(), WriteError>,
    },
    /// This replica gained (true) or lost (false) the lease.
    Leadership(bool),
    /// Nothing happened; time passed (a deadline was reached).
    Tick,
    /// Stop starting passes and dispatching operations; let in-flight ones finish.
    Shutdown,
}

/// A cloud worker's answer.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum CloudReply {
    /// The answer to [`CloudOp::List`]: the routes as the provider listed them, kept
    /// compact (`RouteList::from(vec_of_routes)` makes one).
    Listed(Result<super::RouteList, CloudError>),
    /// The answer to [`CloudOp::Create`] or [`CloudOp::Delete`].
    Done(Result<(), CloudError>),
    /// The answer to [`CloudOp::Apply`]: one outcome per change, in the order sent (a
    /// request that failed as a whole gives its error for every change).
    Applied(Vec<Result<(), CloudError>>),
    /// What the operation spent of the cloud's budget and what the cloud said about
    /// it, sent with the operation's id just before its answer (optional: without it
    /// the declared cost stands). The controller corrects its budget from it.
    Spent(Usage),
    /// The route tables' size and limit after a successful list
    /// ([`Routes::route_tables`](crate::Routes::route_tables)), sent with the list's id
    /// just before its [`CloudReply::Listed`], so that the plan made from the list
    /// sends no create that cannot fit. Optional: without it no limit is known.
    Tables(Vec<TableUsage>),
}

/// Why a condition write failed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// The node no longer exists; nothing to do.
    NodeGone,
    /// The API server could not take it now (a conflict with another writer, or 429
    /// with its Retry-After in `after`); the controller tries again soon.
    Busy {
        /// When the server said to come back, if it did.
        after: Option<Duration>,
    },
    /// Anything else; the write is retried later.
    Failed(String),
}

/// What the controller asks its drivers to do.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Command {
    /// Run a cloud operation and answer with [`Input::Cloud`].
    Cloud {
        /// Answer with this id.
        id: OpId,
        /// The operation.
        op: CloudOp,
        /// The pass and triggers behind it.
        cause: Arc<Cause>,
    },
    /// Patch the node's `NetworkUnavailable` condition; answer with
    /// [`Input::ConditionWritten`].
    WriteCondition {
        /// The node's name.
        node: String,
        /// The node's UID (the patch is made conditional on it).
        uid: String,
        /// The condition to write.
        condition: Condition,
        /// The pass whose outcome the condition reports.
        cause: Arc<Cause>,
    },
    /// Record a Kubernetes event on a node (fire and forget).
    RecordEvent {
        /// The event.
        event: NodeEventRecord,
        /// The pass that saw what the event reports.
        cause: Arc<Cause>,
    },
    /// A pass ended; log it.
    PassFinished(PassReport),
    /// The drivers should stop: the controller has nothing left to do, or may do
    /// nothing more (see [`Exit`]). Emitted once.
    Exit(Exit),
}

/// Why the controller is done, and so the process's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Shutdown was asked for and in-flight work finished (or the drain timed out).
    Shutdown,
    /// This replica lost the lease; the process should exit non-zero, as the CCM does.
    LostLeadership,
    /// The node watch stopped for good (its sender was dropped without a shutdown).
    WatchEnded,
}

/// A cloud operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloudOp {
    /// List the routes of the cluster ([`Routes::list_routes`](crate::Routes::list_routes)).
    List {
        /// The nodes, for mapping cloud targets back to node names.
        nodes: Arc<NodeDirectory>,
    },
    /// Create a route ([`Routes::create_route`](crate::Routes::create_route)).
    Create {
        /// The route: destination and target node.
        route: Route,
        /// The node's UID, upstream's name hint.
        name_hint: String,
        /// The node the route points at, as the provider needs it.
        target: RouteTarget,
    },
    /// Delete a route ([`Routes::delete_route`](crate::Routes::delete_route)).
    Delete {
        /// The route as listed (or as created, with an empty name).
        route: Route,
        /// Why the planner wants it gone.
        reason: DeleteReason,
    },
    /// Apply several creates and deletes to the route tables in one request
    /// ([`Routes::apply_changes`](crate::Routes::apply_changes)), for a provider that
    /// declares a batch size; answer with [`CloudReply::Applied`].
    Apply {
        /// The changes, each for a destination of its own.
        changes: Vec<RouteChange>,
    },
}

impl CloudOp {
    /// The operation's metrics label.
    pub fn operation(&self) -> crate::metrics::CloudOperation {
        match self {
            CloudOp::List { .. } => crate::metrics::CloudOperation::List,
            CloudOp::Create { .. } => crate::metrics::CloudOperation::Create,
            CloudOp::Delete { .. } => crate::metrics::CloudOperation::Delete,
            CloudOp::Apply { .. } => crate::metrics::CloudOperation::Apply,
        }
    }
}

/// A Kubernetes event about a node, as upstream records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeEventRecord {
    /// The node's name.
    pub node: String,
    /// The node's UID.
    pub uid: String,
    /// `Warning` or `Normal`.
    pub kind: &'static str,
    /// The event's reason, e.g. `FailedToCreateRoute`.
    pub reason: &'static str,
    /// The event's message.
    pub message: String,
}

/// A cloud operation for a worker, as the controller emitted it.
#[derive(Clone, Debug)]
pub struct CloudJob {
    /// Answer with this id.
    pub id: OpId,
    /// What to do.
    pub op: CloudOp,
    /// The pass and triggers behind it, for the worker's log lines.
    pub cause: Arc<Cause>,
}

/// What the actor sends to the status writer: the controller's Kubernetes writes.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusRequest {
    /// Patch `NetworkUnavailable`; the writer answers with [`Input::ConditionWritten`].
    WriteCondition {
        /// The node's name.
        node: String,
        /// The node's UID (the patch is made conditional on it).
        uid: String,
        /// The condition to write.
        condition: Condition,
        /// The pass whose outcome the condition reports.
        cause: Arc<Cause>,
    },
    /// Record an event on a node; no answer.
    RecordEvent {
        /// The event.
        event: NodeEventRecord,
        /// The pass that saw what the event reports.
        cause: Arc<Cause>,
    },
}
