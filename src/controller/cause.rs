//! Why a pass runs: the [`Trigger`]s that asked for it, folded into one [`Cause`] that
//! every command of the pass carries, so that logs and metrics name the trigger.

use std::collections::BTreeMap;
use std::fmt;

use crate::metrics::TriggerKind;
use crate::model::Cidr;

/// One thing that asked for a pass.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trigger {
    /// The first complete node list after start.
    Startup,
    /// A complete node list after the watch relisted.
    Relist,
    /// This replica became the leader.
    Leadership,
    /// The previous leader's last possible request has timed out since this replica
    /// took the lease: a list shows any late write of it, and the pass repairs it.
    Handover,
    /// Watch mode's full resync (every 12–24 h).
    Resync,
    /// Poll mode's period.
    Poll,
    /// A node appeared.
    NodeAdded(String),
    /// A node disappeared.
    NodeDeleted(String),
    /// A node's `spec.podCIDRs` changed.
    PodCidrsChanged(String),
    /// A node's `status.addresses` changed.
    AddressesChanged(String),
    /// A node's labels changed so that `--node-selector` selects it now (or its
    /// providerID became this provider's).
    NodeSelected(String),
    /// A routed node is no longer selected; its routes stay unless the controller
    /// deletes the routes of unselected nodes.
    NodeUnselected(String),
    /// Upstream's watch mode only: an update with an unchanged resourceVersion (an
    /// informer resync or relist).
    NodeResynced(String),
    /// A route operation that failed is due for another attempt.
    RouteRetry(Cidr),
    /// The list of cloud routes failed and is due for another attempt.
    ListRetry,
    /// A pass wanted to change a route while an operation on it was in flight; that
    /// operation was answered, so the route is planned again.
    Followup(Cidr),
}

impl Trigger {
    /// The metrics label of this trigger.
    pub fn kind(&self) -> TriggerKind {
        match self {
            Trigger::Startup | Trigger::Leadership | Trigger::Handover => TriggerKind::Startup,
            Trigger::Relist => TriggerKind::Relist,
            Trigger::Resync => TriggerKind::Resync,
            Trigger::Poll => TriggerKind::Poll,
            Trigger::NodeAdded(_) => TriggerKind::NodeAdd,
            Trigger::NodeDeleted(_) => TriggerKind::NodeDelete,
            Trigger::PodCidrsChanged(_)
            | Trigger::AddressesChanged(_)
            | Trigger::NodeSelected(_)
            | Trigger::NodeUnselected(_)
            | Trigger::NodeResynced(_) => TriggerKind::NodeUpdate,
            Trigger::RouteRetry(_) | Trigger::ListRetry | Trigger::Followup(_) => {
                TriggerKind::Retry
            }
        }
    }

    /// The node this trigger is about, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            Trigger::NodeAdded(n)
            | Trigger::NodeDeleted(n)
            | Trigger::PodCidrsChanged(n)
            | Trigger::AddressesChanged(n)
            | Trigger::NodeSelected(n)
            | Trigger::NodeUnselected(n)
            | Trigger::NodeResynced(n) => Some(n),
            _ => None,
        }
    }

    /// Passes for these triggers always list the cloud routes.
    pub(super) fn forces_list(&self) -> bool {
        matches!(
            self,
            Trigger::Startup
                | Trigger::Leadership
                | Trigger::Handover
                | Trigger::Resync
                | Trigger::Poll
        )
    }

    /// Timers start their pass as soon as they fire; node changes are debounced.
    pub(super) fn is_timer(&self) -> bool {
        !matches!(
            self,
            Trigger::NodeAdded(_)
                | Trigger::NodeDeleted(_)
                | Trigger::PodCidrsChanged(_)
                | Trigger::AddressesChanged(_)
                | Trigger::NodeSelected(_)
                | Trigger::NodeUnselected(_)
                | Trigger::NodeResynced(_)
        )
    }
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Startup => f.write_str("startup"),
            Trigger::Relist => f.write_str("node relist"),
            Trigger::Leadership => f.write_str("became leader"),
            Trigger::Handover => f.write_str("previous leader's last request timed out"),
            Trigger::Resync => f.write_str("periodic resync"),
            Trigger::Poll => f.write_str("poll period"),
            Trigger::NodeAdded(n) => write!(f, "node {n} added"),
            Trigger::NodeDeleted(n) => write!(f, "node {n} deleted"),
            Trigger::PodCidrsChanged(n) => write!(f, "node {n} pod CIDRs changed"),
            Trigger::AddressesChanged(n) => write!(f, "node {n} addresses changed"),
            Trigger::NodeSelected(n) => write!(f, "node {n} selected"),
            Trigger::NodeUnselected(n) => write!(f, "node {n} unselected"),
            Trigger::NodeResynced(n) => write!(f, "node {n} resynced"),
            Trigger::RouteRetry(c) => write!(f, "retry of route {c}"),
            Trigger::ListRetry => f.write_str("retry of the route list"),
            Trigger::Followup(c) => write!(f, "follow-up for route {c}"),
        }
    }
}

/// Why a pass runs: the triggers folded into it. Every command of the pass carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cause {
    /// The pass number, counting from 1.
    pub pass: u64,
    /// How many triggers of each kind.
    pub counts: BTreeMap<TriggerKind, u32>,
    /// The first few triggers, for logs.
    pub samples: Vec<Trigger>,
}

const CAUSE_SAMPLES: usize = 8;

impl Cause {
    pub(super) fn add(&mut self, trigger: Trigger) {
        *self.counts.entry(trigger.kind()).or_default() += 1;
        if self.samples.len() < CAUSE_SAMPLES && !self.samples.contains(&trigger) {
            self.samples.push(trigger);
        }
    }

    /// The kind that labels the pass in metrics: the first trigger's.
    pub fn primary(&self) -> TriggerKind {
        self.samples
            .first()
            .map(Trigger::kind)
            .unwrap_or(TriggerKind::Resync)
    }

    /// How many triggers folded into the pass.
    pub fn total(&self) -> u32 {
        self.counts.values().sum()
    }

    /// Whether one of the sampled triggers is a change of `node`.
    pub fn mentions(&self, node: &str) -> bool {
        self.samples.iter().any(|t| t.node() == Some(node))
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.samples.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{t}")?;
        }
        let more = self.total() as usize - self.samples.len();
        if more > 0 {
            write!(f, " and {more} more")?;
        }
        Ok(())
    }
}
