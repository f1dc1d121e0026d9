//! The node reflector: lists the nodes page by page, then watches them from the
//! list's resourceVersion, and feeds the controller [`NodeEvent`]s.
//!
//! [`Reflector`] is the decision logic, sans-IO, in the shape of kube-rs's watcher:
//! one [`WatchState`] enum, told the time and the result of each request, answering
//! with the next [`Action`] and the events to emit. [`spawn_node_watch`] is the thin
//! thread that performs the actions with a [`Client`].
//!
//! Every (re)list is framed by `Init` … `InitApply` … `InitDone`, so the controller
//! can swap its view atomically and find the nodes deleted while the watch was away.
//! The reflector keeps no copy of the nodes. It must never give up: bad lines, 410s,
//! stalls and server errors all end in a retry with backoff, never in a panic or an
//! exit, and nothing is dropped without a log line.

use std::io::{self, BufRead, BufReader};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use super::client::Client;
use super::error::{ApiErrorKind, KubeError, Status, prefix};
use super::stop::StopHandle;
use crate::controller::NodeEvent;
use crate::metrics::Metrics;
use crate::model::{LabeledNode, Node, NodeList};
use crate::node_filter::NodeFilter;

/// Settings of the node watch.
#[derive(Clone, Debug)]
pub struct WatchConfig {
    /// Nodes per list page (default 500, as client-go's pager and kube-rs).
    pub page_size: u32,
    /// A watch with no bytes for this long is dead (default 120 s: the API server
    /// sends a bookmark about every minute).
    pub idle_timeout: Duration,
    /// `timeoutSeconds` of each watch is drawn from `[min, max)` (default
    /// [300 s, 600 s), as client-go, so that clients do not reconnect in lock-step).
    pub watch_timeout: (Duration, Duration),
    /// The longest watch line accepted (default 16 MiB); a longer one restarts the
    /// stream.
    pub max_line: usize,
    /// The largest list page body (default 64 MiB).
    pub max_page_bytes: u64,
    pub backoff: BackoffConfig,
    /// Seed for the timeout draws and the jitter; `None` seeds from the OS.
    pub seed: Option<u64>,
    /// Which nodes the controller routes (default: all). A node it does not route is
    /// sent as its name and providerID alone ([`NodeEvent::Unselected`]).
    pub filter: NodeFilter,
}

impl Default for WatchConfig {
    fn default() -> WatchConfig {
        WatchConfig {
            page_size: 500,
            idle_timeout: Duration::from_secs(120),
            watch_timeout: (Duration::from_secs(300), Duration::from_secs(600)),
            max_line: 16 << 20,
            max_page_bytes: 64 << 20,
            backoff: BackoffConfig::default(),
            seed: None,
            filter: NodeFilter::everything(),
        }
    }
}

/// Retry delays after failures: `initial`, doubling up to `max`, each jittered by
/// ±25 %; back to `initial` once the watch has been healthy for `reset_after`.
#[derive(Clone, Debug)]
pub struct BackoffConfig {
    /// Default 800 ms (client-go's reflector and kube-rs).
    pub initial: Duration,
    /// Default 30 s.
    pub max: Duration,
    /// Default 2 min.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> BackoffConfig {
        BackoffConfig {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            reset_after: Duration::from_secs(120),
        }
    }
}

/// Exponential backoff with jitter and a reset after a healthy period.
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
    healthy_since: Option<Instant>,
}

impl Backoff {
    pub fn new(config: BackoffConfig) -> Backoff {
        Backoff {
            config,
            attempt: 0,
            healthy_since: None,
        }
    }

    /// Something worked at `now` (a list completed, a watch started).
    pub fn healthy(&mut self, now: Instant) {
        self.healthy_since.get_or_insert(now);
    }

    /// Something failed at `now`: the delay before the next try. `jitter` is a
    /// random number in [0, 1).
    pub fn failure(&mut self, now: Instant, jitter: f64) -> Duration {
        if self
            .healthy_since
            .is_some_and(|h| now.saturating_duration_since(h) >= self.config.reset_after)
        {
            self.attempt = 0;
        }
        self.healthy_since = None;
        self.attempt = self.attempt.saturating_add(1);
        let (initial, max) = (self.config.initial, self.config.max);
        crate::backoff::delay(initial, self.attempt, max, (0.75, 1.25), jitter)
    }
}

/// Where the reflector is. Transitions happen in the `on_*` methods of [`Reflector`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// Nothing is listed, or the last list or watch said to start over (a 410, a
    /// failed page). Waits for: the backoff delay, if any, then LISTs the first page.
    /// Goes to: `InitPage` if more pages follow, `InitListed` if that page was the
    /// whole list, or stays here if the page fails.
    Empty,
    /// A list is under way. Waits for: the page after `continue_token` (sent without
    /// a resourceVersion: the token holds the snapshot). Goes to: `InitPage` with the
    /// next token, `InitListed` after the last page, `Empty` if a page fails (an
    /// expired token answers 410).
    InitPage { continue_token: String },
    /// Everything up to `resource_version` has been delivered: a list completed, or a
    /// watch ended. Waits for: the backoff delay after a failure (none after a clean
    /// end), then WATCHes from `resource_version`. Goes to: `Watching` when the watch
    /// starts, `Empty` if the server answers 410, stays here on other errors.
    InitListed { resource_version: String },
    /// A watch stream is open; `resource_version` is the last one seen (object or
    /// bookmark). Waits for: the next line. Goes to: `InitListed` with that version
    /// when the stream ends, stalls, errs or carries a line that cannot be used;
    /// `Empty` on a 410 `ERROR` event.
    Watching { resource_version: String },
}

/// What the driver should do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing before this instant (backoff).
    Wait(Instant),
    /// LIST one page of nodes.
    List { continue_token: Option<String> },
    /// WATCH nodes from `resource_version`, asking the server to end the stream after
    /// `timeout_seconds`.
    Watch {
        resource_version: String,
        timeout_seconds: u64,
    },
}

/// The result of one watch line.
// The event is moved straight on to the channel; boxing it would cost an allocation
// per event to save stack space of a short-lived return value.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineOutcome {
    /// Forward this event to the controller.
    Event(NodeEvent),
    /// Nothing to forward (a bookmark, a blank line).
    Nothing,
    /// Close this stream; the state already says what comes next.
    Restart,
}

/// Why a watch stream ended.
#[derive(Debug)]
pub enum WatchEnd {
    /// The server closed it after a complete line (its timeout was reached).
    Clean,
    /// No bytes arrived within the idle timeout.
    IdleTimeout,
    /// The connection ended in the middle of a line of `len` bytes.
    Truncated { len: usize },
    /// A line longer than the limit; `start` holds its first bytes.
    LineTooLong { len: usize, start: Vec<u8> },
    /// A transport error while reading.
    Failed(KubeError),
}

/// A clean end this soon after the start, with no line received, is treated as a
/// failure so that a server that closes every watch at once is not hammered.
const MIN_CLEAN_WATCH: Duration = Duration::from_secs(1);

/// The sans-IO reflector. See the module documentation.
#[derive(Debug)]
pub struct Reflector {
    config: WatchConfig,
    state: WatchState,
    backoff: Backoff,
    rng: SmallRng,
    not_before: Option<Instant>,
    watch_started: Option<Instant>,
    lines_in_watch: u64,
    /// Abnormal stream ends (everything but a clean end), for the restarts metric.
    restarts: u64,
}

impl Reflector {
    pub fn new(config: WatchConfig) -> Reflector {
        let rng = match config.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => rand::make_rng(),
        };
        Reflector {
            backoff: Backoff::new(config.backoff.clone()),
            config,
            state: WatchState::Empty,
            rng,
            not_before: None,
            watch_started: None,
            lines_in_watch: 0,
            restarts: 0,
        }
    }

    pub fn state(&self) -> &WatchState {
        &self.state
    }

    pub fn config(&self) -> &WatchConfig {
        &self.config
    }

    /// How many watch streams ended abnormally or were restarted by a 410.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The next thing to do at `now`.
    pub fn next_action(&mut self, now: Instant) -> Action {
        if let Some(t) = self.not_before {
            if t > now {
                return Action::Wait(t);
            }
            self.not_before = None;
        }
        match &self.state {
            WatchState::Empty => Action::List {
                continue_token: None,
            },
            WatchState::InitPage { continue_token } => Action::List {
                continue_token: Some(continue_token.clone()),
            },
            WatchState::InitListed { resource_version }
            | WatchState::Watching { resource_version } => {
                let (min, max) = self.config.watch_timeout;
                let secs = if max > min {
                    self.rng
                        .random_range(min.as_secs()..max.as_secs().max(min.as_secs() + 1))
                } else {
                    min.as_secs()
                };
                Action::Watch {
                    resource_version: resource_version.clone(),
                    timeout_seconds: secs.max(1),
                }
            }
        }
    }

    /// A list page arrived (or failed). Returns the events to emit: `Init` before the
    /// first page's nodes, `InitApply` per node, `InitDone` after the last page.
    pub fn on_list_page(
        &mut self,
        page: Result<NodeList<LabeledNode>, &KubeError>,
        now: Instant,
    ) -> Vec<NodeEvent> {
        let page = match page {
            Ok(p) => p,
            Err(e) => {
                let during = match &self.state {
                    WatchState::InitPage { .. } => "a later page of the node list",
                    _ => "the node list",
                };
                log::warn!("listing nodes failed ({during}): {e}; listing again from the start");
                self.state = WatchState::Empty;
                self.fail(now, retry_after(e));
                return Vec::new();
            }
        };
        let mut out = Vec::with_capacity(page.items.len() + 2);
        if self.state == WatchState::Empty {
            out.push(NodeEvent::Init);
        }
        for item in page.items {
            out.push(match self.config.filter.check(&item.node, &item.labels) {
                Ok(()) => NodeEvent::InitApply(item.node),
                Err(why) => NodeEvent::InitUnselected {
                    name: item.node.name,
                    provider_id: item.node.provider_id,
                    why,
                },
            });
        }
        let meta = page.metadata;
        if !meta.continue_token.is_empty() {
            self.state = WatchState::InitPage {
                continue_token: meta.continue_token,
            };
        } else if meta.resource_version.is_empty() {
            log::warn!("the node list has no resourceVersion; cannot watch from it, listing again");
            self.state = WatchState::Empty;
            self.fail(now, None);
        } else {
            out.push(NodeEvent::InitDone);
            self.state = WatchState::InitListed {
                resource_version: meta.resource_version,
            };
            self.backoff.healthy(now);
        }
        out
    }

    /// The watch request was answered: `Ok` means the stream is open.
    pub fn on_watch_started(&mut self, result: Result<(), &KubeError>, now: Instant) {
        let rv = self.resource_version().to_string();
        match result {
            Ok(()) => {
                self.state = WatchState::Watching {
                    resource_version: rv,
                };
                self.watch_started = Some(now);
                self.lines_in_watch = 0;
                self.backoff.healthy(now);
            }
            Err(e) if e.is(ApiErrorKind::Gone) => {
                log::info!(
                    "watching nodes from resourceVersion {rv} answered 410 ({e}); relisting"
                );
                self.relist(now);
            }
            Err(e) => {
                log::warn!("watching nodes from resourceVersion {rv} failed: {e}; retrying");
                self.state = WatchState::InitListed {
                    resource_version: rv,
                };
                self.fail(now, retry_after(e));
            }
        }
    }

    /// One line of the watch stream (without its newline).
    pub fn on_watch_line(&mut self, line: &[u8], now: Instant) -> LineOutcome {
        if line.iter().all(u8::is_ascii_whitespace) {
            return LineOutcome::Nothing;
        }
        self.lines_in_watch += 1;
        match serde_json::from_slice::<WireEvent>(line) {
            Ok(WireEvent::Added(item)) => self.filtered(item, NodeEvent::Added),
            Ok(WireEvent::Modified(item)) => self.filtered(item, NodeEvent::Modified),
            // A deleted node's routes go whether it was routed or not.
            Ok(WireEvent::Deleted(item)) => self.object(item.node, NodeEvent::Deleted),
            Ok(WireEvent::Bookmark(b)) => {
                if !b.metadata.resource_version.is_empty() {
                    self.set_resource_version(b.metadata.resource_version);
                }
                LineOutcome::Nothing
            }
            Ok(WireEvent::Error(status)) => {
                if status.code == 410 || status.reason == "Expired" || status.reason == "Gone" {
                    log::info!(
                        "the node watch reported 410 {} ({}); relisting",
                        status.reason,
                        status.message
                    );
                    self.relist(now);
                } else {
                    log::warn!(
                        "the node watch reported an error: {} {} ({}); restarting the watch \
                         from resourceVersion {}",
                        status.code,
                        status.reason,
                        status.message,
                        self.resource_version()
                    );
                    self.restart(now);
                }
                LineOutcome::Restart
            }
            Err(e) => {
                let kind = serde_json::from_slice::<Probe>(line)
                    .ok()
                    .and_then(|p| p.kind)
                    .unwrap_or_default();
                let problem = if !kind.is_empty() && !KNOWN_TYPES.contains(&kind.as_str()) {
                    format!("unknown event type {kind:?}")
                } else {
                    format!("malformed event (type {kind:?}): {e}")
                };
                log::warn!(
                    "node watch: {problem}; line of {} bytes starting {:?}; restarting the \
                     watch from resourceVersion {}",
                    line.len(),
                    prefix(line, 200),
                    self.resource_version()
                );
                self.restart(now);
                LineOutcome::Restart
            }
        }
    }

    /// The stream ended (or the driver gave up on it).
    pub fn on_watch_end(&mut self, end: WatchEnd, now: Instant) {
        if !matches!(self.state, WatchState::Watching { .. }) {
            // A line already decided what comes next (relist or restart).
            return;
        }
        let rv = self.resource_version().to_string();
        match end {
            WatchEnd::Clean => {
                let short = self
                    .watch_started
                    .is_some_and(|s| now.saturating_duration_since(s) < MIN_CLEAN_WATCH);
                self.state = WatchState::InitListed {
                    resource_version: rv,
                };
                if short && self.lines_in_watch == 0 {
                    log::warn!("the node watch ended at once with no event; backing off");
                    self.fail(now, None);
                } else {
                    log::debug!(
                        "the node watch ended; resuming from resourceVersion {}",
                        self.resource_version()
                    );
                }
            }
            WatchEnd::IdleTimeout => {
                log::warn!(
                    "the node watch was silent for {:?} (no event, no bookmark); reconnecting \
                     from resourceVersion {rv}",
                    self.config.idle_timeout
                );
                self.restart(now);
            }
            WatchEnd::Truncated { len } => {
                log::warn!(
                    "the node watch connection ended in the middle of a line ({len} bytes \
                     discarded); reconnecting from resourceVersion {rv}"
                );
                self.restart(now);
            }
            WatchEnd::LineTooLong { len, start } => {
                log::warn!(
                    "node watch: a line exceeded the limit of {} bytes (at least {len} bytes, \
                     starting {:?}); restarting the watch from resourceVersion {rv}",
                    self.config.max_line,
                    prefix(&start, 200)
                );
                self.restart(now);
            }
            WatchEnd::Failed(e) => {
                log::warn!("the node watch failed: {e}; reconnecting from resourceVersion {rv}");
                self.restart(now);
            }
        }
    }

    /// An added or changed node: the event, or for a node the filter does not route,
    /// its name and providerID alone. The labels are dropped here either way.
    fn filtered(&mut self, item: LabeledNode, event: fn(Node) -> NodeEvent) -> LineOutcome {
        match self.config.filter.check(&item.node, &item.labels) {
            Ok(()) => self.object(item.node, event),
            Err(why) => {
                self.note_version(&item.node);
                LineOutcome::Event(NodeEvent::Unselected {
                    name: item.node.name,
                    provider_id: item.node.provider_id,
                    why,
                })
            }
        }
    }

    fn object(&mut self, node: Node, event: fn(Node) -> NodeEvent) -> LineOutcome {
        self.note_version(&node);
        LineOutcome::Event(event(node))
    }

    fn note_version(&mut self, node: &Node) {
        if !node.resource_version.is_empty() {
            self.set_resource_version(node.resource_version.clone());
        }
    }

    fn resource_version(&self) -> &str {
        match &self.state {
            WatchState::InitListed { resource_version }
            | WatchState::Watching { resource_version } => resource_version,
            WatchState::Empty | WatchState::InitPage { .. } => "",
        }
    }

    fn set_resource_version(&mut self, rv: String) {
        if let WatchState::Watching { resource_version } = &mut self.state {
            *resource_version = rv;
        }
    }

    /// Back to `InitListed` at the last good version, after a backoff.
    fn restart(&mut self, now: Instant) {
        let rv = self.resource_version().to_string();
        self.state = WatchState::InitListed {
            resource_version: rv,
        };
        self.restarts += 1;
        self.fail(now, None);
    }

    fn relist(&mut self, now: Instant) {
        self.state = WatchState::Empty;
        self.restarts += 1;
        self.fail(now, None);
    }

    fn fail(&mut self, now: Instant, at_least: Option<Duration>) {
        let jitter = self.rng.random_range(0.0..1.0);
        let delay = self
            .backoff
            .failure(now, jitter)
            .max(at_least.unwrap_or_default());
        self.not_before = Some(now + delay);
    }
}

fn retry_after(e: &KubeError) -> Option<Duration> {
    e.api().and_then(|a| a.retry_after)
}

const KNOWN_TYPES: &[&str] = &["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];

/// One watch event; the node is decoded straight into the slim [`Node`].
#[derive(Deserialize)]
#[serde(tag = "type", content = "object")]
enum WireEvent {
    #[serde(rename = "ADDED")]
    Added(LabeledNode),
    #[serde(rename = "MODIFIED")]
    Modified(LabeledNode),
    #[serde(rename = "DELETED")]
    Deleted(LabeledNode),
    #[serde(rename = "BOOKMARK")]
    Bookmark(Bookmark),
    #[serde(rename = "ERROR")]
    Error(Status),
}

#[derive(Deserialize)]
struct Bookmark {
    #[serde(default)]
    metadata: BookmarkMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct BookmarkMeta {
    resource_version: String,
}

/// Just the type of an event, to tell an unknown type from a malformed event.
#[derive(Deserialize)]
struct Probe {
    #[serde(rename = "type")]
    kind: Option<String>,
}

// ---------------------------------------------------------------------------------
// The driver thread.

/// A running node watch.
pub struct NodeWatch {
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl NodeWatch {
    /// A handle that stops the watch from elsewhere.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Stops the watch and waits for its thread (promptly: a blocked read is
    /// interrupted).
    pub fn stop(mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.stop.stop();
    }
}

/// Starts the node watch thread. It sends events on `events` until stopped or until
/// the receiver is dropped.
pub fn spawn_node_watch(
    client: &Client,
    config: WatchConfig,
    events: Sender<NodeEvent>,
    metrics: Arc<Metrics>,
) -> io::Result<NodeWatch> {
    let stop = StopHandle::new();
    let client = client.streaming(config.idle_timeout, &stop);
    let thread_stop = stop.clone();
    let thread = std::thread::Builder::new()
        .name("node-watch".into())
        .spawn(move || {
            let mut driver = Driver {
                client,
                reflector: Reflector::new(config),
                events,
                metrics,
                stop: thread_stop,
            };
            driver.run();
            driver.metrics.watch_healthy.set(0);
        })?;
    Ok(NodeWatch {
        stop,
        thread: Some(thread),
    })
}

struct Driver {
    client: Client,
    reflector: Reflector,
    events: Sender<NodeEvent>,
    metrics: Arc<Metrics>,
    stop: StopHandle,
}

/// The driver stops: the stop handle was used or the controller is gone.
struct Stopped;

impl Driver {
    fn run(&mut self) {
        while !self.stop.is_stopped() {
            let step = match self.reflector.next_action(Instant::now()) {
                Action::Wait(t) => {
                    if self.stop.sleep(t.saturating_duration_since(Instant::now())) {
                        return;
                    }
                    Ok(())
                }
                Action::List { continue_token } => self.list(continue_token),
                Action::Watch {
                    resource_version,
                    timeout_seconds,
                } => self.watch(&resource_version, timeout_seconds),
            };
            if step.is_err() {
                return;
            }
        }
    }

    fn list(&mut self, continue_token: Option<String>) -> Result<(), Stopped> {
        let mut path = format!("/api/v1/nodes?limit={}", self.reflector.config().page_size);
        if let Some(token) = &continue_token {
            path.push_str("&continue=");
            path.push_str(&encode_query(token));
        }
        let limit = self.reflector.config().max_page_bytes;
        let page = self
            .client
            .get_json_large::<NodeList<LabeledNode>>(&path, limit);
        if matches!(page, Err(KubeError::Stopped)) || self.stop.is_stopped() {
            return Err(Stopped);
        }
        let now = Instant::now();
        let events = match page {
            Ok(p) => self.reflector.on_list_page(Ok(p), now),
            Err(e) => self.reflector.on_list_page(Err(&e), now),
        };
        for e in events {
            self.send(e)?;
        }
        Ok(())
    }

    fn watch(&mut self, rv: &str, timeout_seconds: u64) -> Result<(), Stopped> {
        let path = format!(
            "/api/v1/nodes?watch=1&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}",
            encode_query(rv)
        );
        let resp = match self.client.get_stream(&path) {
            Ok(r) => r,
            Err(KubeError::Stopped) => return Err(Stopped),
            Err(e) => {
                if self.stop.is_stopped() {
                    return Err(Stopped);
                }
                self.reflector.on_watch_started(Err(&e), Instant::now());
                self.metrics.watch_restarts.inc();
                return Ok(());
            }
        };
        self.reflector.on_watch_started(Ok(()), Instant::now());
        self.metrics.watch_healthy.set(1);
        let restarts = self.reflector.restarts();
        let result = self.read_stream(resp);
        self.metrics.watch_healthy.set(0);
        self.metrics
            .watch_restarts
            .add(self.reflector.restarts() - restarts);
        result
    }

    fn read_stream(&mut self, resp: ureq::http::Response<ureq::Body>) -> Result<(), Stopped> {
        let max = self.reflector.config().max_line;
        let mut reader = BufReader::with_capacity(64 << 10, resp.into_body().into_reader());
        let mut line = Vec::new();
        loop {
            let read = read_line_capped(&mut reader, &mut line, max);
            if self.stop.is_stopped() {
                return Err(Stopped);
            }
            let now = Instant::now();
            let end = match read {
                Ok(ReadLine::Line) => match self.reflector.on_watch_line(&line, now) {
                    LineOutcome::Event(e) => {
                        self.send(e)?;
                        continue;
                    }
                    LineOutcome::Nothing => continue,
                    LineOutcome::Restart => return Ok(()),
                },
                Ok(ReadLine::Eof) => WatchEnd::Clean,
                Ok(ReadLine::Truncated(len)) => WatchEnd::Truncated { len },
                Ok(ReadLine::TooLong(len)) => WatchEnd::LineTooLong {
                    len,
                    start: line[..line.len().min(200)].to_vec(),
                },
                Err(e) => match ureq::Error::from(e) {
                    ureq::Error::Timeout(_) => WatchEnd::IdleTimeout,
                    other => WatchEnd::Failed(KubeError::Transport {
                        url: format!("{}/api/v1/nodes?watch=1", self.client.server()),
                        timeout: false,
                        message: other.to_string(),
                    }),
                },
            };
            self.reflector.on_watch_end(end, now);
            return Ok(());
        }
    }

    fn send(&self, event: NodeEvent) -> Result<(), Stopped> {
        self.events.send(event).map_err(|_| Stopped)
    }
}

/// How a capped line read ended.
#[derive(Debug, PartialEq, Eq)]
enum ReadLine {
    /// A complete line is in the buffer (without its newline).
    Line,
    /// The stream ended between lines.
    Eof,
    /// The stream ended inside a line of this many bytes.
    Truncated(usize),
    /// The line exceeded the cap after this many bytes; the buffer holds its start.
    TooLong(usize),
}

/// Reads one line into `buf` without ever holding more than `max` bytes of it.
fn read_line_capped(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<ReadLine> {
    buf.clear();
    loop {
        let available = r.fill_buf()?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                ReadLine::Eof
            } else {
                ReadLine::Truncated(buf.len())
            });
        }
        let (chunk, found) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if buf.len() + chunk > max {
            let room = max.saturating_sub(buf.len());
            buf.extend_from_slice(&available[..room.min(chunk)]);
            let len = buf.len() + (chunk - room.min(chunk));
            return Ok(ReadLine::TooLong(len));
        }
        buf.extend_from_slice(&available[..chunk]);
        r.consume(chunk + usize::from(found));
        if found {
            return Ok(ReadLine::Line);
        }
    }
}

/// Lists every node once, following continue tokens (for `route-controller plan`
/// against a live cluster; the controller itself uses the watch).
pub fn list_nodes(client: &Client, config: &WatchConfig) -> Result<Vec<Node>, KubeError> {
    let mut nodes = Vec::new();
    for_each_node(client, config, |n| nodes.push(n.node))?;
    Ok(nodes)
}

/// Lists every node once, handing each with its labels to `each` page by page, so
/// that a caller that filters them holds the labels of one page at a time.
pub fn for_each_node(
    client: &Client,
    config: &WatchConfig,
    mut each: impl FnMut(LabeledNode),
) -> Result<(), KubeError> {
    let mut continue_token: Option<String> = None;
    loop {
        let mut path = format!("/api/v1/nodes?limit={}", config.page_size);
        if let Some(token) = &continue_token {
            path.push_str("&continue=");
            path.push_str(&encode_query(token));
        }
        let page: NodeList<LabeledNode> = client.get_json_large(&path, config.max_page_bytes)?;
        page.items.into_iter().for_each(&mut each);
        if page.metadata.continue_token.is_empty() {
            return Ok(());
        }
        continue_token = Some(page.metadata.continue_token);
    }
}

/// Percent-encodes a query value (resourceVersions and continue tokens are opaque).
fn encode_query(value: &str) -> String {
    crate::percent::encode(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ListMeta;

    fn node(name: &str, rv: &str) -> Node {
        Node {
            name: name.into(),
            resource_version: rv.into(),
            ..Node::default()
        }
    }

    fn page(names: &[&str], rv: &str, continue_token: &str) -> NodeList<LabeledNode> {
        NodeList {
            items: names
                .iter()
                .map(|n| LabeledNode {
                    node: node(n, "1"),
                    labels: Default::default(),
                })
                .collect(),
            metadata: ListMeta {
                resource_version: rv.into(),
                continue_token: continue_token.into(),
            },
        }
    }

    fn reflector() -> Reflector {
        Reflector::new(WatchConfig {
            seed: Some(7),
            ..WatchConfig::default()
        })
    }

    fn gone() -> KubeError {
        KubeError::Api(crate::kube::ApiError::from_response(
            "GET /api/v1/nodes".into(),
            410,
            None,
            br#"{"kind":"Status","reason":"Expired","code":410}"#,
        ))
    }

    /// Lists two pages and starts the watch at `rv` 100.
    fn watching(r: &mut Reflector, t0: Instant) {
        r.on_list_page(Ok(page(&["a"], "", "tok")), t0);
        r.on_list_page(Ok(page(&["b"], "100", "")), t0);
        r.on_watch_started(Ok(()), t0);
    }

    #[test]
    fn a_paginated_list_is_framed_by_init_markers_and_followed_by_a_watch_from_its_version() {
        let t0 = Instant::now();
        let mut r = reflector();
        assert_eq!(
            r.next_action(t0),
            Action::List {
                continue_token: None
            }
        );
        let first = r.on_list_page(Ok(page(&["a", "b"], "", "tok-1")), t0);
        assert_eq!(
            first,
            vec![
                NodeEvent::Init,
                NodeEvent::InitApply(node("a", "1")),
                NodeEvent::InitApply(node("b", "1"))
            ]
        );
        assert_eq!(
            r.next_action(t0),
            Action::List {
                continue_token: Some("tok-1".into())
            }
        );
        let last = r.on_list_page(Ok(page(&["c"], "42", "")), t0);
        assert_eq!(
            last,
            vec![NodeEvent::InitApply(node("c", "1")), NodeEvent::InitDone]
        );
        match r.next_action(t0) {
            Action::Watch {
                resource_version,
                timeout_seconds,
            } => {
                assert_eq!(resource_version, "42");
                assert!((300..600).contains(&timeout_seconds), "{timeout_seconds}");
            }
            other => panic!("expected a watch, got {other:?}"),
        }
    }

    /// Guards the node filter in the watch: an unselected node leaves the reflector as
    /// its name and providerID alone (its labels and other fields are dropped), in a list and in the watch;
    /// a deleted node is reported whatever its labels, so its routes go.
    #[test]
    fn the_node_filter_sends_unselected_nodes_by_name_and_deletions_whole() {
        use crate::node_filter::{OwnProvider, Unselected};
        use crate::selector::Selector;
        let t0 = Instant::now();
        let mut r = Reflector::new(WatchConfig {
            seed: Some(7),
            filter: NodeFilter {
                selector: Selector::parse("role=worker").unwrap(),
                own_provider: Some(OwnProvider::Hcloud),
            },
            ..WatchConfig::default()
        });
        let list: NodeList<LabeledNode> = serde_json::from_str(
            r#"{"metadata":{"resourceVersion":"10"},"items":[
              {"metadata":{"name":"cloud","labels":{"role":"worker"}},"spec":{"providerID":"hcloud://1"}},
              {"metadata":{"name":"robot","labels":{"role":"worker"}},"spec":{"providerID":"hrobot://7"}},
              {"metadata":{"name":"infra","labels":{"role":"infra"}}}]}"#,
        )
        .unwrap();
        let events = r.on_list_page(Ok(list), t0);
        let names: Vec<String> = events
            .iter()
            .map(|e| match e {
                NodeEvent::InitApply(n) => format!("routed {}", n.name),
                NodeEvent::InitUnselected { name, why, .. } => format!("{name}: {why:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "Init",
                "routed cloud",
                "robot: OtherProvider",
                "infra: ByLabels",
                "InitDone"
            ]
        );
        r.on_watch_started(Ok(()), t0);
        let relabeled = br#"{"type":"MODIFIED","object":{"metadata":{"name":"cloud","resourceVersion":"11","labels":{"role":"infra"}}}}"#;
        assert_eq!(
            r.on_watch_line(relabeled, t0),
            LineOutcome::Event(NodeEvent::Unselected {
                name: "cloud".into(),
                provider_id: None,
                why: Unselected::ByLabels
            })
        );
        let deleted = br#"{"type":"DELETED","object":{"metadata":{"name":"infra","resourceVersion":"12","labels":{"role":"infra"}}}}"#;
        assert_eq!(
            r.on_watch_line(deleted, t0),
            LineOutcome::Event(NodeEvent::Deleted(node("infra", "12")))
        );
        // The versions of filtered events still move the watch on.
        r.on_watch_end(WatchEnd::Clean, t0 + Duration::from_secs(400));
        assert_eq!(
            r.state(),
            &WatchState::InitListed {
                resource_version: "12".into()
            }
        );
    }

    #[test]
    fn a_failed_page_starts_the_list_over_after_a_backoff() {
        let t0 = Instant::now();
        let mut r = reflector();
        r.on_list_page(Ok(page(&["a"], "", "tok-1")), t0);
        assert!(r.on_list_page(Err(&gone()), t0).is_empty());
        assert_eq!(r.state(), &WatchState::Empty);
        let Action::Wait(until) = r.next_action(t0) else {
            panic!("expected a backoff");
        };
        assert_eq!(
            r.next_action(until),
            Action::List {
                continue_token: None
            }
        );
        // The new list starts with Init again, so the controller drops the partial one.
        assert_eq!(
            r.on_list_page(Ok(page(&[], "9", "")), until),
            vec![NodeEvent::Init, NodeEvent::InitDone]
        );
    }

    #[test]
    fn a_clean_end_resumes_from_the_last_version_seen_without_relisting() {
        let t0 = Instant::now();
        let mut r = reflector();
        watching(&mut r, t0);
        let added =
            br#"{"type":"ADDED","object":{"metadata":{"name":"c","resourceVersion":"101"}}}"#;
        assert_eq!(
            r.on_watch_line(added, t0),
            LineOutcome::Event(NodeEvent::Added(node("c", "101")))
        );
        let bookmark =
            br#"{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"150"}}}"#;
        assert_eq!(r.on_watch_line(bookmark, t0), LineOutcome::Nothing);
        let later = t0 + Duration::from_secs(400);
        r.on_watch_end(WatchEnd::Clean, later);
        match r.next_action(later) {
            Action::Watch {
                resource_version, ..
            } => assert_eq!(resource_version, "150"),
            other => panic!("expected an immediate re-watch, got {other:?}"),
        }
    }

    #[test]
    fn a_410_error_event_or_status_relists() {
        let t0 = Instant::now();
        let mut r = reflector();
        watching(&mut r, t0);
        let expired = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 100 (200)","reason":"Expired","code":410}}"#;
        assert_eq!(r.on_watch_line(expired, t0), LineOutcome::Restart);
        assert_eq!(r.state(), &WatchState::Empty);
        // The stream end that follows does not override the decision.
        r.on_watch_end(WatchEnd::Clean, t0);
        assert_eq!(r.state(), &WatchState::Empty);

        let mut r = reflector();
        watching(&mut r, t0);
        r.on_watch_end(WatchEnd::Clean, t0 + Duration::from_secs(300));
        r.on_watch_started(Err(&gone()), t0 + Duration::from_secs(300));
        assert_eq!(r.state(), &WatchState::Empty);
    }

    #[test]
    fn garbage_and_unknown_event_types_restart_the_watch_from_the_last_good_version() {
        let t0 = Instant::now();
        for bad in [
            &b"{\"type\":\"ADDED\",\"object\":{\"metadata\":"[..],
            b"<html>proxy error</html>",
            br#"{"type":"SURPRISE","object":{}}"#,
            br#"{"type":"ADDED","object":{"metadata":{"name":7}}}"#,
        ] {
            let mut r = reflector();
            watching(&mut r, t0);
            r.on_watch_line(
                br#"{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"120"}}}"#,
                t0,
            );
            assert_eq!(r.on_watch_line(bad, t0), LineOutcome::Restart);
            assert_eq!(
                r.state(),
                &WatchState::InitListed {
                    resource_version: "120".into()
                }
            );
            assert!(matches!(r.next_action(t0), Action::Wait(_)));
            assert_eq!(r.restarts(), 1);
        }
    }

    #[test]
    fn a_stalled_or_cut_stream_reconnects_from_the_last_version_after_a_backoff() {
        let t0 = Instant::now();
        for end in [
            WatchEnd::IdleTimeout,
            WatchEnd::Truncated { len: 17 },
            WatchEnd::LineTooLong {
                len: 1 << 25,
                start: b"{\"type\":".to_vec(),
            },
        ] {
            let mut r = reflector();
            watching(&mut r, t0);
            r.on_watch_end(end, t0);
            assert_eq!(
                r.state(),
                &WatchState::InitListed {
                    resource_version: "100".into()
                }
            );
            let Action::Wait(until) = r.next_action(t0) else {
                panic!("expected a backoff");
            };
            assert!(matches!(r.next_action(until), Action::Watch { .. }));
        }
    }

    #[test]
    fn a_watch_that_ends_at_once_with_nothing_backs_off() {
        let t0 = Instant::now();
        let mut r = reflector();
        watching(&mut r, t0);
        r.on_watch_end(WatchEnd::Clean, t0 + Duration::from_millis(10));
        assert!(matches!(
            r.next_action(t0 + Duration::from_millis(10)),
            Action::Wait(_)
        ));
    }

    #[test]
    fn backoff_doubles_to_the_cap_and_resets_after_two_minutes_of_health() {
        let t0 = Instant::now();
        let mut b = Backoff::new(BackoffConfig::default());
        // With the jitter at its middle the delays are the nominal ones.
        let delays: Vec<Duration> = (0..8).map(|_| b.failure(t0, 0.5)).collect();
        let ms: Vec<u128> = delays.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, vec![800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        // Healthy for less than two minutes: the backoff keeps growing.
        b.healthy(t0);
        assert_eq!(
            b.failure(t0 + Duration::from_secs(119), 0.5).as_millis(),
            30000
        );
        // Healthy for two minutes: back to the start.
        let t1 = t0 + Duration::from_secs(200);
        b.healthy(t1);
        assert_eq!(
            b.failure(t1 + Duration::from_secs(120), 0.5).as_millis(),
            800
        );
        // Jitter spreads each delay by ±25 %.
        let mut b = Backoff::new(BackoffConfig::default());
        assert_eq!(b.failure(t0, 0.0).as_millis(), 600);
        let mut b = Backoff::new(BackoffConfig::default());
        assert_eq!(b.failure(t0, 1.0).as_millis(), 1000);
    }

    #[test]
    fn capped_line_reads_tell_lines_truncation_and_oversize_apart() {
        let mut r = io::Cursor::new(b"one\ntwo\npart".to_vec());
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            ReadLine::Line
        );
        assert_eq!(buf, b"one");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            ReadLine::Line
        );
        assert_eq!(buf, b"two");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            ReadLine::Truncated(4)
        );
        let mut r = io::Cursor::new(b"0123456789abcdef\n".to_vec());
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            ReadLine::TooLong(16)
        );
        assert_eq!(buf, b"0123456789");
        let mut r = io::Cursor::new(Vec::new());
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            ReadLine::Eof
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode_query("eyJ2Ijo=+/"), "eyJ2Ijo%3D%2B%2F");
        assert_eq!(encode_query("12345"), "12345");
    }

    /// Invariant 8 for the watch stream: any line, valid JSON or not, gives a line
    /// outcome (an event, nothing, or a restart), never a panic or a hang.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz::{bytes, check, config};
        use crate::fuzz_seed;

        static LINES: &[&[u8]] = &[
            fuzz_seed!("watch-added.json"),
            fuzz_seed!("watch-modified.json"),
            fuzz_seed!("watch-deleted.json"),
            fuzz_seed!("watch-bookmark.json"),
            fuzz_seed!("watch-error.json"),
        ];

        proptest! {
            #![proptest_config(config())]

            /// With a node filter too, so that the labels' path is fuzzed as well.
            #[test]
            fn watch_lines(
                lines in proptest::collection::vec(bytes(LINES), 1..4),
                filtered in any::<bool>(),
            ) {
                check("the watch's line parser", move || {
                    let t0 = Instant::now();
                    let mut r = if filtered {
                        Reflector::new(WatchConfig {
                            seed: Some(7),
                            filter: NodeFilter {
                                selector: crate::selector::Selector::parse(
                                    "kubernetes.io/os=linux,!example.com/no-routes",
                                )
                                .expect("a valid selector"),
                                own_provider: Some(crate::node_filter::OwnProvider::Hcloud),
                            },
                            ..WatchConfig::default()
                        })
                    } else {
                        reflector()
                    };
                    watching(&mut r, t0);
                    for line in &lines {
                        let _ = r.on_watch_line(line, t0);
                    }
                    let _ = r.next_action(t0);
                });
            }
        }
    }
}
