//! The status writer: a thread that writes nodes' `NetworkUnavailable` condition and
//! records Kubernetes events for the controller.
//!
//! Conditions are written as upstream's `SetNodeCondition` does: a strategic-merge
//! PATCH of `nodes/NAME/status` carrying only that condition (conditions merge on
//! `type`). Each request is made once: a Conflict or a 429 is answered at once as
//! [`WriteError::Busy`] and the controller schedules the retry (upstream's 5 attempts
//! 100–200 ms apart), so one busy node never holds back the writes of the others on
//! this single thread. A node that is gone answers [`WriteError::NodeGone`]; that is
//! not an error.
//!
//! Events are aggregated like client-go's event correlator ([`EventCorrelator`], sans-IO):
//! the same failure on the same node within the window bumps the `count` of one event
//! instead of creating a new one, and a per-node token bucket caps the rate, so a
//! route failing for hours writes a handful of API calls, not thousands of events.
//! This module never decides what to write; the controller does.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};
use serde::de::IgnoredAny;
use serde_json::json;

use super::client::{Client, Method};
use super::error::{ApiErrorKind, KubeError};
use crate::controller::{NodeEventRecord, StatusRequest, WriteError};
use crate::metrics::Metrics;
use crate::model::{Condition, NETWORK_UNAVAILABLE};
use crate::ratelimit::TokenBucket;

/// The content type of a strategic merge patch.
pub const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// The component name upstream's route controller records events under.
pub const COMPONENT: &str = "route_controller";

/// Settings of the status writer.
#[derive(Clone, Debug)]
pub struct StatusConfig {
    /// `reportingInstance` of events: this replica's identity (`<hostname>_<suffix>`).
    pub identity: String,
    /// Where events about nodes go (default `default`, as client-go's recorder puts
    /// events of cluster-scoped objects).
    pub event_namespace: String,
    pub events: EventConfig,
}

impl StatusConfig {
    pub fn new(identity: impl Into<String>) -> StatusConfig {
        StatusConfig {
            identity: identity.into(),
            event_namespace: "default".to_string(),
            events: EventConfig::default(),
        }
    }
}

/// How events are aggregated and rate-limited (client-go's correlator defaults).
#[derive(Clone, Debug)]
pub struct EventConfig {
    /// Identical events within this window update one event (default 10 min).
    pub window: Duration,
    /// Events per node allowed at once (default 25).
    pub spam_burst: u32,
    /// Then one more per this period (default 5 min).
    pub spam_refill: Duration,
}

impl Default for EventConfig {
    fn default() -> EventConfig {
        EventConfig {
            window: Duration::from_secs(600),
            spam_burst: 25,
            spam_refill: Duration::from_secs(300),
        }
    }
}

/// What to do with one event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventDecision {
    /// POST a new event with count 1.
    Create,
    /// PATCH the existing event `name` to `count`.
    Update { name: String, count: u32 },
    /// The node's event budget is spent; drop it.
    Drop,
}

/// client-go's event correlator, sans-IO: aggregation of identical events and a
/// per-node spam filter.
#[derive(Debug)]
pub struct EventCorrelator {
    config: EventConfig,
    recent: HashMap<EventKey, Recent>,
    budgets: HashMap<String, TokenBucket>,
}

/// Events are "the same" when node, type, reason and message agree, ignoring the
/// elapsed time upstream writes into the message ("after 1.2s") and the identifiers
/// that differ on every attempt (see [`strip_request_ids`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    node: String,
    uid: String,
    kind: &'static str,
    reason: &'static str,
    message: String,
}

#[derive(Debug)]
struct Recent {
    name: String,
    count: u32,
    last_seen: Instant,
}

/// Recent events remembered at most (client-go's LRU holds 4096).
const MAX_RECENT: usize = 4096;

impl EventCorrelator {
    pub fn new(config: EventConfig) -> EventCorrelator {
        EventCorrelator {
            config,
            recent: HashMap::new(),
            budgets: HashMap::new(),
        }
    }

    /// Decides what to do with `event` at `now`.
    pub fn observe(&mut self, event: &NodeEventRecord, now: Instant) -> EventDecision {
        let window = self.config.window;
        self.recent
            .retain(|_, r| now.saturating_duration_since(r.last_seen) <= window);
        let per_second = 1.0 / self.config.spam_refill.as_secs_f64().max(1e-3);
        let burst = self.config.spam_burst;
        let budget = self
            .budgets
            .entry(event.node.clone())
            .or_insert_with(|| TokenBucket::new(per_second, burst, now));
        if budget.available_at(now) > now {
            return EventDecision::Drop;
        }
        budget.reserve(now);
        match self.recent.get_mut(&key(event)) {
            Some(r) => {
                r.count += 1;
                r.last_seen = now;
                EventDecision::Update {
                    name: r.name.clone(),
                    count: r.count,
                }
            }
            None => EventDecision::Create,
        }
    }

    /// `event` was created as `name` at `now`.
    pub fn created(&mut self, event: &NodeEventRecord, name: String, now: Instant) {
        if self.recent.len() >= MAX_RECENT {
            // Forget the oldest; a repeat of it merely creates a new event.
            if let Some(oldest) = self
                .recent
                .iter()
                .min_by_key(|(_, r)| r.last_seen)
                .map(|(k, _)| k.clone())
            {
                self.recent.remove(&oldest);
            }
        }
        self.recent.insert(
            key(event),
            Recent {
                name,
                count: 1,
                last_seen: now,
            },
        );
    }

    /// The aggregated event is gone (expired on the server); the next one creates anew.
    pub fn forget(&mut self, event: &NodeEventRecord) {
        self.recent.remove(&key(event));
    }
}

fn key(event: &NodeEventRecord) -> EventKey {
    EventKey {
        node: event.node.clone(),
        uid: event.uid.clone(),
        kind: event.kind,
        reason: event.reason,
        message: strip_request_ids(&strip_elapsed(&event.message)),
    }
}

/// Removes what cloud APIs put into an error to identify one request, so that repeats
/// of one failure compare equal: Hetzner's `correlation ID 1a2b…`, EC2's
/// `[request 5f3e…]`, and the ID of a failed Hetzner action (`action 1234`). The
/// event itself keeps the full, latest message.
pub fn strip_request_ids(message: &str) -> String {
    let token = |c: char| c.is_ascii_alphanumeric() || c == '-';
    let out = drop_after(message, "correlation ID ", token);
    let out = drop_after(&out, "[request ", token);
    drop_after(&out, "action ", |c| c.is_ascii_digit())
}

/// `message` without the run of `part` characters after each `marker`.
fn drop_after(message: &str, marker: &str, part: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(marker) {
        out.push_str(&rest[..i + marker.len()]);
        rest = rest[i + marker.len()..].trim_start_matches(&part);
    }
    out.push_str(rest);
    out
}

/// Removes upstream's elapsed time (" after 1.2s") from a message, so that repeats of
/// one failure compare equal.
pub fn strip_elapsed(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(i) = rest.find(" after ") {
        let tail = &rest[i + " after ".len()..];
        let token_end = tail.find([':', ' ']).unwrap_or(tail.len());
        if token_end > 0 && crate::duration::parse(&tail[..token_end]).is_ok() {
            out.push_str(&rest[..i]);
            rest = &tail[token_end..];
        } else {
            out.push_str(&rest[..i + " after ".len()]);
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------
// The thread.

/// Starts the status writer. It runs until `requests` is closed (all senders
/// dropped) or the reply receiver is gone.
pub fn spawn_status_writer(
    client: Client,
    config: StatusConfig,
    requests: Receiver<StatusRequest>,
    replies: Sender<(String, Result<(), WriteError>)>,
    metrics: Arc<Metrics>,
) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("status-writer".into())
        .spawn(move || {
            let mut writer = StatusWriter::new(client, config, metrics);
            for request in requests.iter() {
                match request {
                    StatusRequest::WriteCondition {
                        node,
                        uid,
                        condition,
                        cause,
                    } => {
                        log::debug!(
                            "node {node}: NetworkUnavailable={} ({}), pass {}, caused by {cause}",
                            condition.status,
                            condition.reason,
                            cause.pass
                        );
                        let result = writer.write_condition(&node, &uid, &condition);
                        if replies.send((node, result)).is_err() {
                            return;
                        }
                    }
                    StatusRequest::RecordEvent { event, cause } => {
                        log::debug!(
                            "node {}: event {} (pass {}, caused by {cause})",
                            event.node,
                            event.reason,
                            cause.pass
                        );
                        writer.record_event(&event)
                    }
                }
            }
        })
}

/// Writes conditions and events; used by the thread, and directly by tests and
/// embedders that run it on their own thread.
pub struct StatusWriter {
    client: Client,
    config: StatusConfig,
    correlator: EventCorrelator,
    metrics: Arc<Metrics>,
    /// Set when creating an event answered 404 (the namespace or the events API is
    /// not there): events are not recorded from then on, and that was logged once.
    events_off: bool,
}

impl StatusWriter {
    pub fn new(client: Client, config: StatusConfig, metrics: Arc<Metrics>) -> StatusWriter {
        StatusWriter {
            correlator: EventCorrelator::new(config.events.clone()),
            client,
            config,
            metrics,
            events_off: false,
        }
    }

    /// Whether events are no longer recorded because creating one answered 404.
    pub fn events_off(&self) -> bool {
        self.events_off
    }

    /// Patches `NetworkUnavailable` on `node`, once (see the module documentation).
    pub fn write_condition(
        &mut self,
        node: &str,
        uid: &str,
        condition: &Condition,
    ) -> Result<(), WriteError> {
        let now = rfc3339(SystemTime::now());
        let body = json!({"status": {"conditions": [{
            "type": NETWORK_UNAVAILABLE,
            "status": condition.status,
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }]}});
        let path = format!("/api/v1/nodes/{node}/status");
        let result = match self.client.write_json::<IgnoredAny>(
            Method::Patch,
            &path,
            STRATEGIC_MERGE_PATCH,
            &body,
            None,
        ) {
            Ok(_) => Ok(()),
            Err(err) => match err.kind() {
                Some(ApiErrorKind::NotFound) => {
                    log::info!("node {node} (uid {uid}) is gone; its condition is not written");
                    Err(WriteError::NodeGone)
                }
                Some(ApiErrorKind::Conflict) => Err(WriteError::Busy { after: None }),
                Some(ApiErrorKind::TooManyRequests) => Err(WriteError::Busy {
                    after: Some(retry_after(&err)),
                }),
                _ => Err(WriteError::Failed(err.to_string())),
            },
        };
        match &result {
            Ok(()) => {
                self.metrics.condition_writes.inc();
                log::info!(
                    "node {node}: set NetworkUnavailable={} ({})",
                    condition.status,
                    condition.reason
                );
            }
            Err(WriteError::NodeGone | WriteError::Busy { .. }) => {}
            Err(WriteError::Failed(e)) => {
                self.metrics.condition_write_failures.inc();
                log::warn!("node {node}: writing NetworkUnavailable failed: {e}");
            }
        }
        result
    }

    /// Records `event`, aggregated with recent identical ones.
    pub fn record_event(&mut self, event: &NodeEventRecord) {
        if self.events_off {
            log::debug!(
                "event {} on node {} not recorded (events are off): {}",
                event.reason,
                event.node,
                event.message
            );
            return;
        }
        let now = Instant::now();
        let result = match self.correlator.observe(event, now) {
            EventDecision::Drop => {
                log::debug!(
                    "event {} on node {} dropped by the per-node rate limit: {}",
                    event.reason,
                    event.node,
                    event.message
                );
                return;
            }
            EventDecision::Create => self.create_event(event, now),
            EventDecision::Update { name, count } => {
                match self.update_event(&name, count, &event.message) {
                    Err(e) if e.is(ApiErrorKind::NotFound) => {
                        // Events expire (1 h by default); start a new one.
                        self.correlator.forget(event);
                        self.create_event(event, now)
                    }
                    other => other,
                }
            }
        };
        match result {
            Ok(()) => self.metrics.events.inc(),
            // Only a create gets here with a 404: an update's 404 (an expired
            // event) became a create above.
            Err(e) if e.is(ApiErrorKind::NotFound) => {
                // Retrying each event would log the same 404 for ever; the
                // conditions and the metrics still say what happens.
                self.events_off = true;
                log::warn!(
                    "recording events is off from now on: {e}. The API server has no \
                     namespace {:?} or does not serve core/v1 events; create the namespace \
                     and restart the controller to record events again (routes and \
                     conditions go on)",
                    self.config.event_namespace
                );
            }
            Err(e) => log::warn!(
                "recording event {} on node {} failed: {e}",
                event.reason,
                event.node
            ),
        }
    }

    fn create_event(&mut self, event: &NodeEventRecord, now: Instant) -> Result<(), KubeError> {
        let wall = SystemTime::now();
        let nanos = wall
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = format!("{}.{nanos:x}", event.node);
        let ts = rfc3339(wall);
        let namespace = &self.config.event_namespace;
        let body = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": event.node, "uid": event.uid},
            "type": event.kind,
            "reason": event.reason,
            "message": event.message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.config.identity,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        });
        self.client.write_json::<IgnoredAny>(
            Method::Post,
            &format!("/api/v1/namespaces/{namespace}/events"),
            "application/json",
            &body,
            None,
        )?;
        self.correlator.created(event, name, now);
        Ok(())
    }

    fn update_event(&mut self, name: &str, count: u32, message: &str) -> Result<(), KubeError> {
        let body = json!({
            "count": count,
            "lastTimestamp": rfc3339(SystemTime::now()),
            "message": message,
        });
        self.client
            .write_json::<IgnoredAny>(
                Method::Patch,
                &format!(
                    "/api/v1/namespaces/{}/events/{name}",
                    self.config.event_namespace
                ),
                STRATEGIC_MERGE_PATCH,
                &body,
                None,
            )
            .map(|_| ())
    }
}

fn retry_after(err: &KubeError) -> Duration {
    err.api()
        .and_then(|a| a.retry_after)
        .unwrap_or(Duration::from_secs(1))
        .min(Duration::from_secs(10))
}

/// RFC 3339 in UTC with whole seconds, as metav1.Time serialises.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(0))
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(node: &str, elapsed: &str, error: &str) -> NodeEventRecord {
        NodeEventRecord {
            node: node.into(),
            uid: format!("uid-{node}"),
            kind: "Warning",
            reason: "FailedToCreateRoute",
            message: format!(
                "Could not create route uid-{node} 10.244.1.0/24 for node {node} after {elapsed}: {error}"
            ),
        }
    }

    #[test]
    fn elapsed_time_is_stripped_from_messages() {
        assert_eq!(
            strip_elapsed("Could not create route u 10.0.0.0/24 for node n after 1.2s: quota"),
            "Could not create route u 10.0.0.0/24 for node n: quota"
        );
        assert_eq!(
            strip_elapsed("retry after lunch: no"),
            "retry after lunch: no",
            "only durations are stripped"
        );
    }

    #[test]
    fn per_request_identifiers_are_stripped_from_messages() {
        assert_eq!(
            strip_request_ids(
                "hcloud: POST /networks/1/actions/add_route: invalid input (invalid_input, HTTP 400, correlation ID 000000006b05f055)"
            ),
            "hcloud: POST /networks/1/actions/add_route: invalid input (invalid_input, HTTP 400, correlation ID )"
        );
        assert_eq!(
            strip_request_ids("RouteLimitExceeded: too many routes (HTTP 400) [request 5f3e-aa91]"),
            "RouteLimitExceeded: too many routes (HTTP 400) [request ]"
        );
        assert_eq!(
            strip_request_ids("hcloud: POST x: action 1042 failed: boom (server_error)"),
            "hcloud: POST x: action  failed: boom (server_error)"
        );
        assert_eq!(strip_request_ids("no action taken"), "no action taken");
    }

    #[test]
    fn repeats_of_one_failure_with_new_request_ids_update_one_event() {
        let t0 = Instant::now();
        let mut c = EventCorrelator::new(EventConfig::default());
        let first = failure(
            "n1",
            "1s",
            "refused (invalid_input, HTTP 400, correlation ID aaaa)",
        );
        assert_eq!(c.observe(&first, t0), EventDecision::Create);
        c.created(&first, "n1.abc".into(), t0);
        let again = failure(
            "n1",
            "2s",
            "refused (invalid_input, HTTP 400, correlation ID bbbb)",
        );
        assert_eq!(
            c.observe(&again, t0 + Duration::from_secs(20)),
            EventDecision::Update {
                name: "n1.abc".into(),
                count: 2
            }
        );
    }

    #[test]
    fn repeats_within_the_window_update_one_event_and_later_ones_create_anew() {
        let t0 = Instant::now();
        let mut c = EventCorrelator::new(EventConfig::default());
        let first = failure("n1", "1.2s", "quota exceeded");
        assert_eq!(c.observe(&first, t0), EventDecision::Create);
        c.created(&first, "n1.abc".into(), t0);
        let again = failure("n1", "3m2s", "quota exceeded");
        assert_eq!(
            c.observe(&again, t0 + Duration::from_secs(60)),
            EventDecision::Update {
                name: "n1.abc".into(),
                count: 2
            }
        );
        assert_eq!(
            c.observe(&again, t0 + Duration::from_secs(120)),
            EventDecision::Update {
                name: "n1.abc".into(),
                count: 3
            }
        );
        // A different error or another node is a different event.
        assert_eq!(
            c.observe(&failure("n1", "1s", "no such server"), t0),
            EventDecision::Create
        );
        assert_eq!(
            c.observe(&failure("n2", "1s", "quota exceeded"), t0),
            EventDecision::Create
        );
        // Quiet for longer than the window: a new event.
        assert_eq!(
            c.observe(&again, t0 + Duration::from_secs(120 + 601)),
            EventDecision::Create
        );
    }

    #[test]
    fn the_per_node_budget_drops_a_flood_and_refills_slowly() {
        let t0 = Instant::now();
        let mut c = EventCorrelator::new(EventConfig::default());
        let decisions: Vec<EventDecision> = (0..30)
            .map(|i| c.observe(&failure("n1", "1s", &format!("error {i}")), t0))
            .collect();
        assert_eq!(
            decisions
                .iter()
                .filter(|d| **d == EventDecision::Drop)
                .count(),
            5
        );
        assert_eq!(decisions[24], EventDecision::Create);
        assert_eq!(decisions[25], EventDecision::Drop);
        // Another node has its own budget.
        assert_eq!(
            c.observe(&failure("n2", "1s", "x"), t0),
            EventDecision::Create
        );
        // One token comes back every five minutes.
        let later = t0 + Duration::from_secs(300);
        assert_eq!(
            c.observe(&failure("n1", "1s", "y"), later),
            EventDecision::Create
        );
        assert_eq!(
            c.observe(&failure("n1", "1s", "z"), later),
            EventDecision::Drop
        );
    }

    #[test]
    fn times_are_rfc3339_utc_seconds() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_071_219);
        assert_eq!(rfc3339(t), "2026-11-30T20:40:19Z");
    }
}
