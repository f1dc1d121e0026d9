//! What the controller writes to Kubernetes: each node's `NetworkUnavailable`
//! condition, written from what the cloud holds once the node's creates have
//! resolved (and only when it changes), retried with backoff per node so that one
//! failing node holds back no other; and upstream's `FailedToCreateRoute` event.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use super::{Command, Controller, NodeEventRecord, WriteError};
use crate::model::{Cidr, Condition};
use crate::plan;
use crate::plan::NodeFacts;
use crate::provider::CloudError;

/// Busy answers in a row retried quickly (upstream's conflict attempts); after that a
/// busy node backs off like a failing one.
const BUSY_ATTEMPTS: u32 = 5;

/// Condition writes in flight and waiting for a retry. See the module documentation.
#[derive(Default)]
pub(super) struct Conditions {
    /// What was sent and not yet answered, per node.
    in_flight: HashMap<String, Condition>,
    /// When a failed write is tried again, per node.
    retries: BTreeMap<String, Instant>,
    /// Failed writes in a row per node, for the backoff; kept apart from `retries`,
    /// which a retry's write clears.
    failures: HashMap<String, u32>,
    /// Why a node is not routed, when the controller knows better than "a create
    /// failed": a full route table, a pre-flight refusal. Reason and message.
    reasons: HashMap<String, (&'static str, String)>,
}

/// What a pass does about one node's condition: mark it routed, write it, or both.
struct ConditionDecision {
    node: String,
    mark_routed: bool,
    /// The condition and the node's UID.
    write: Option<(Condition, String)>,
}

/// How a condition write was answered, for the controller.
pub(super) enum Answer {
    /// Written: the node view shows it until the watch confirms.
    Written(Condition),
    /// Nothing to do (the node is gone, or the write was not ours).
    Nothing,
    /// Failed for the `attempts`-th time in a row.
    Failed { attempts: u32, error: String },
    /// Busy (a conflict, a 429) for the `attempts`-th time in a row.
    Busy {
        attempts: u32,
        after: Option<Duration>,
    },
}

impl Conditions {
    pub fn in_flight(&self, node: &str) -> Option<&Condition> {
        self.in_flight.get(node)
    }

    pub fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
    }

    pub fn sent(&mut self, node: &str, condition: Condition) {
        self.in_flight.insert(node.to_string(), condition);
    }

    /// A write for `node` is being decided now: a pending retry is moot.
    pub fn retry_sent(&mut self, node: &str) {
        self.retries.remove(node);
    }

    pub fn retry_at(&mut self, node: String, at: Instant) {
        self.retries.insert(node, at);
    }

    /// The node is gone: nothing more to write.
    pub fn forget(&mut self, node: &str) {
        self.retries.remove(node);
        self.failures.remove(node);
        self.reasons.remove(node);
    }

    /// `NetworkUnavailable=True` for `node` says `reason` until one of its creates
    /// succeeds.
    pub fn set_reason(&mut self, node: &str, reason: &'static str, message: &str) {
        self.reasons
            .insert(node.to_string(), (reason, message.to_string()));
    }

    pub fn reason(&self, node: &str) -> Option<(&'static str, &str)> {
        self.reasons.get(node).map(|(r, m)| (*r, m.as_str()))
    }

    pub fn clear_reason(&mut self, node: &str) {
        self.reasons.remove(node);
    }

    pub fn answered(&mut self, node: &str, result: Result<(), WriteError>) -> Answer {
        let Some(written) = self.in_flight.remove(node) else {
            return Answer::Nothing;
        };
        match result {
            Ok(()) => {
                self.failures.remove(node);
                Answer::Written(written)
            }
            Err(WriteError::NodeGone) => {
                self.failures.remove(node);
                Answer::Nothing
            }
            Err(WriteError::Failed(error)) => Answer::Failed {
                attempts: self.count_failure(node),
                error,
            },
            Err(WriteError::Busy { after }) => Answer::Busy {
                attempts: self.count_failure(node),
                after,
            },
        }
    }

    fn count_failure(&mut self, node: &str) -> u32 {
        let failures = self.failures.entry(node.to_string()).or_default();
        *failures += 1;
        *failures
    }

    /// The nodes whose retry is due at `now`.
    pub fn due(&self, now: Instant) -> Vec<String> {
        self.retries
            .iter()
            .filter(|(_, t)| **t <= now)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The condition writes to try again, by node.
    pub fn retries(&self) -> impl Iterator<Item = (&str, Instant)> {
        self.retries.iter().map(|(node, at)| (node.as_str(), *at))
    }
}

impl Controller {
    pub(super) fn failed_create_event(
        &mut self,
        c: &plan::CreateRequest,
        pass: u64,
        err: &CloudError,
        took: Duration,
        out: &mut Vec<Command>,
    ) {
        // A node unselected while its create was in flight gets no event.
        if !self.leading || self.nodes.unselected().contains_key(&c.route.target_node) {
            return;
        }
        out.push(Command::RecordEvent {
            event: NodeEventRecord {
                node: c.route.target_node.clone(),
                // The name hint is the node's UID (upstream's contract).
                uid: c.name_hint.clone(),
                kind: "Warning",
                reason: "FailedToCreateRoute",
                message: format!(
                    "Could not create route {} {} for node {} after {}: {}",
                    c.name_hint,
                    c.route.destination_cidr,
                    c.route.target_node,
                    crate::duration::format(took),
                    err.message
                ),
            },
            cause: self.passes.cause_of(pass),
        });
    }

    pub(super) fn write_condition_for(
        &mut self,
        node: &str,
        routable: Option<bool>,
        pass: u64,
        out: &mut Vec<Command>,
    ) {
        if self.write_condition(node, routable, out)
            && let Some(r) = self.passes.report(pass)
        {
            r.conditions += 1;
        }
    }

    /// Writes `NetworkUnavailable` for `node` from what the cloud now holds, unless the
    /// node already shows that value; returns whether a write was sent. `routable` is
    /// the planner's verdict; `None` recomputes it (for retries of failed writes).
    pub(super) fn write_condition(
        &mut self,
        node: &str,
        routable: Option<bool>,
        out: &mut Vec<Command>,
    ) -> bool {
        match self.nodes.position(node) {
            Some(at) => self.write_condition_at(at, routable, out),
            None => {
                self.conditions.retry_sent(node);
                false
            }
        }
    }

    /// [`Controller::write_condition`] for the node at `at` of the view's name order:
    /// a pass decides for every node, and most need nothing, so nothing of a node is
    /// looked up by name or copied until a write or a mark is due.
    pub(super) fn write_condition_at(
        &mut self,
        at: u32,
        routable: Option<bool>,
        out: &mut Vec<Command>,
    ) -> bool {
        let Some(node) = self.nodes.name_at(at) else {
            return false;
        };
        self.conditions.retry_sent(node);
        if !self.leading || self.shutting_down {
            return false;
        }
        let Some(decision) = self.condition_decision(at, routable) else {
            return false;
        };
        self.condition_effects += 1;
        if decision.mark_routed {
            // The route exists: this node no longer counts towards node-to-route latency.
            self.nodes.all_routed(&decision.node);
        }
        let Some((condition, uid)) = decision.write else {
            return false;
        };
        self.conditions.sent(&decision.node, condition.clone());
        let cause = self.passes.latest_cause();
        out.push(Command::WriteCondition {
            node: decision.node,
            uid,
            condition,
            cause,
        });
        true
    }

    /// What [`Controller::write_condition_at`] does for the node at `at`; `None` when
    /// nothing.
    fn condition_decision(&self, at: u32, routable: Option<bool>) -> Option<ConditionDecision> {
        let known = self.nodes.at(at)?;
        let node = known.name();
        let routes = self.view.as_ref().map(|v| v.routes_to(node));
        let routes_to = |c: &Cidr| routes.clone().is_some_and(|mut r| r.any(|r| r == *c));
        let managed =
            known.has_pod_cidrs() || routes.clone().is_some_and(|mut r| r.next().is_some());
        if !managed {
            return None;
        }
        let routable = routable.unwrap_or_else(|| known.is_routable());
        // A pod CIDR this cloud can never route (IPv6 on Hetzner) does not hold back a
        // node whose other CIDRs are routed; it was reported once when refused.
        let unroutable: Vec<Cidr> = self.refusals.lasting_for(node).collect();
        let all_routed = known
            .pod_cidrs()
            .all(|c| c.is_ok_and(|c| routes_to(&c) || unroutable.contains(&c)))
            && (unroutable.is_empty() || known.valid_cidrs().any(|c| routes_to(&c)));
        let created = routable && all_routed;
        let in_flight = self.conditions.in_flight(node);
        let shown;
        let current = match in_flight {
            Some(c) => Some(c),
            None => {
                shown = known.network_unavailable();
                shown.as_ref()
            }
        };
        let condition = match self.conditions.reason(node) {
            Some((reason, message)) if !created => {
                plan::network_condition_because(reason, message, current)
            }
            _ => plan::network_condition(created, current),
        };
        // Most nodes of a pass were routed long ago: no clock runs for them and they
        // are not marked, so there is nothing to stop and no need to find them again.
        let waits = known.waits_since_list || self.nodes.clock_runs_for(known);
        let mark_routed = created && waits;
        if condition.is_none() && !mark_routed {
            return None;
        }
        Some(ConditionDecision {
            node: node.to_string(),
            mark_routed,
            write: condition.map(|c| (c, known.uid().to_string())),
        })
    }

    pub(super) fn on_condition_written(
        &mut self,
        node: String,
        result: Result<(), WriteError>,
        now: Instant,
    ) {
        match self.conditions.answered(&node, result) {
            Answer::Written(condition) => self.nodes.condition_written(&node, condition),
            Answer::Nothing => {}
            Answer::Busy { attempts, after } if attempts < BUSY_ATTEMPTS => {
                // Upstream's conflict retry, 100–200 ms apart, or the server's
                // Retry-After; scheduled here, so no other node's write waits.
                let delay = after.unwrap_or_else(|| {
                    Duration::from_millis(100).mul_f64(1.0 + self.retries.draw())
                });
                log::debug!("node {node}: NetworkUnavailable write busy; retrying in {delay:?}");
                self.conditions.retry_at(node, now + delay);
            }
            Answer::Busy { attempts, .. } => {
                let delay = self
                    .retries
                    .backoff(attempts - BUSY_ATTEMPTS + 1, self.retries.initial());
                log::warn!(
                    "writing NetworkUnavailable on node {node}: still busy after {attempts} attempts; retrying in {delay:?}"
                );
                self.conditions.retry_at(node, now + delay);
            }
            Answer::Failed { attempts, error } => {
                let delay = self.retries.backoff(attempts, self.retries.initial());
                log::warn!(
                    "writing NetworkUnavailable on node {node} failed: {error}; retrying in {delay:?}"
                );
                self.conditions.retry_at(node, now + delay);
            }
        }
    }
}
