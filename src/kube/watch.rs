//! The node reflector: lists the nodes (as a streaming list where the API server
//! supports it, page by page otherwise), then watches them from the list's
//! resourceVersion, and feeds the controller [`NodeEvent`]s.
//!
//! [`Reflector`] is the decision logic, sans-IO, in the shape of kube-rs's watcher:
//! one [`WatchState`] enum, told the time and the result of each request, answering
//! with the next [`Action`] and the events to emit. [`spawn_node_watch`] is the thin
//! thread that performs the actions with a [`Client`].
//!
//! Every (re)list is framed by `Init` … `InitApply` … `InitDone`, so the controller
//! can swap its view atomically and find the nodes deleted while the watch was away.
//! A streaming list (KEP-3157, "WatchList": a watch with `sendInitialEvents=true`)
//! is framed the same way: `Init` when the stream opens, `InitApply` per initial
//! ADDED event, `InitDone` at the bookmark annotated `k8s.io/initial-events-end`,
//! and nothing before that bookmark counts as a complete view. It holds no page in
//! memory: each line is decoded and handed on. The server that refuses it (a 4xx) or
//! ignores it (no end bookmark) gets paginated lists for the rest of the process.
//! The reflector keeps no copy of the nodes. It must never give up: bad lines, 410s,
//! stalls and server errors all end in a retry with backoff, never in a panic or an
//! exit, and nothing is dropped without a log line.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use super::client::Client;
use super::error::{ApiErrorKind, KubeError, Status, prefix};
use super::protobuf::{self, Frame};
use super::stop::StopHandle;
use crate::controller::NodeEvent;
use crate::metrics::Metrics;
use crate::model::skim::{self, EventType};
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
    /// Start and relist with a streaming list (`sendInitialEvents=true`) instead of
    /// paginated lists (default true; `--watch-list=false` turns it off). A plain
    /// reconnect never asks for the initial events again.
    pub watch_list: bool,
    /// A streaming list that goes this long without an initial event (since its
    /// stream opened, or since its last ADDED event) and without their end comes from
    /// a server that ignores `sendInitialEvents`: the reflector lists instead, for
    /// good. A slow replay that keeps sending nodes is never cut (default 60 s, twice the request timeout a
    /// list page gets: the replay comes from the API server's watch cache as fast
    /// as the reflector reads it).
    pub initial_events_timeout: Duration,
    /// Ask for the watch in Kubernetes' protobuf encoding, JSON the fallback
    /// (default true, `--kube-api-content-type` as the CCM's): the API server encodes
    /// a node about four times faster in it ([`super::protobuf`]). The stream is read
    /// in whichever the server answers with.
    pub protobuf: bool,
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
            watch_list: true,
            initial_events_timeout: Duration::from_secs(60),
            protobuf: true,
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
    /// failed page, a broken streaming list). Waits for: the backoff delay, if any,
    /// then starts a streaming list, or LISTs the first page once streaming lists are
    /// off. Goes to: `InitialEvents` when the stream opens; `InitPage` if more pages
    /// follow, `InitListed` if that page was the whole list; or stays here if the
    /// request fails (lists from then on if the server refused the streaming list).
    Empty,
    /// A streaming list is under way; `last_event` is when its stream opened or its
    /// last ADDED event came. Its ADDED events are the list's items. Waits for: the bookmark annotated
    /// `k8s.io/initial-events-end`. Goes to: `Watching` from that bookmark's version
    /// (the same stream goes on as a watch); `Empty` to stream again after a 410, a
    /// bad line or a broken stream; `Empty` with lists for good when the server shows
    /// that it ignores `sendInitialEvents` (another event type before the end, or no
    /// end within `initial_events_timeout` of `last_event`).
    InitialEvents { last_event: Instant },
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
    /// Start a streaming list: WATCH nodes with `sendInitialEvents=true`,
    /// `resourceVersionMatch=NotOlderThan` and no resourceVersion (a consistent
    /// snapshot: a relist only follows a 410, so the last version is too old), asking
    /// the server to end the stream after `timeout_seconds`.
    WatchList { timeout_seconds: u64 },
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

impl WatchEnd {
    /// A few words for a log line.
    fn describe(&self) -> String {
        match self {
            WatchEnd::Clean => "the server ended the stream".into(),
            WatchEnd::IdleTimeout => "no bytes within the idle timeout".into(),
            WatchEnd::Truncated { len } => format!("cut in the middle of a line of {len} bytes"),
            WatchEnd::LineTooLong { len, .. } => format!("a line of at least {len} bytes"),
            WatchEnd::Failed(e) => e.to_string(),
        }
    }
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
    /// Paginated lists only: turned off by the configuration, or the server refused
    /// or ignored a streaming list. Never turned back on, so the mode cannot flap.
    lists_only: bool,
    /// The (re)list under way, for its log line.
    sync: Option<SyncProgress>,
    /// Whether the node filter reads labels: if not, a watch event's are not decoded.
    reads_labels: bool,
}

/// How far the current (re)list has come.
#[derive(Clone, Copy, Debug)]
struct SyncProgress {
    started: Instant,
    items: u64,
    pages: u32,
}

impl Reflector {
    pub fn new(config: WatchConfig) -> Reflector {
        let rng = match config.seed {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => rand::make_rng(),
        };
        Reflector {
            backoff: Backoff::new(config.backoff.clone()),
            state: WatchState::Empty,
            rng,
            not_before: None,
            watch_started: None,
            lines_in_watch: 0,
            restarts: 0,
            lists_only: !config.watch_list,
            sync: None,
            reads_labels: config.filter.reads_labels(),
            config,
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

    /// Whether (re)lists are streaming lists: configured so, and the server has not
    /// refused or ignored one.
    pub fn uses_watch_list(&self) -> bool {
        !self.lists_only
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
            // The stream of `InitialEvents` is open while the driver reads it; asked
            // anyway, the answer is to start over.
            WatchState::Empty | WatchState::InitialEvents { .. } => {
                self.sync = Some(SyncProgress {
                    started: now,
                    items: 0,
                    pages: 0,
                });
                if self.lists_only {
                    Action::List {
                        continue_token: None,
                    }
                } else {
                    Action::WatchList {
                        timeout_seconds: self.watch_timeout(),
                    }
                }
            }
            WatchState::InitPage { continue_token } => Action::List {
                continue_token: Some(continue_token.clone()),
            },
            WatchState::InitListed { resource_version }
            | WatchState::Watching { resource_version } => {
                let resource_version = resource_version.clone();
                Action::Watch {
                    resource_version,
                    timeout_seconds: self.watch_timeout(),
                }
            }
        }
    }

    /// `timeoutSeconds` of the next watch, drawn from `watch_timeout`.
    fn watch_timeout(&mut self) -> u64 {
        let (min, max) = self.config.watch_timeout;
        let secs = if max > min {
            self.rng
                .random_range(min.as_secs()..max.as_secs().max(min.as_secs() + 1))
        } else {
            min.as_secs()
        };
        secs.max(1)
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
        if let Some(sync) = &mut self.sync {
            sync.pages += 1;
            sync.items += page.items.len() as u64;
        }
        for item in page.items {
            out.push(self.list_item(item));
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
            self.log_sync_done(now);
        }
        out
    }

    /// One node of a list or of a streaming list's initial events.
    fn list_item(&self, item: LabeledNode) -> NodeEvent {
        match self.config.filter.check(&item.node, &item.labels) {
            Ok(()) => NodeEvent::InitApply(item.node),
            Err(why) => NodeEvent::InitUnselected {
                name: item.node.name,
                provider_id: item.node.provider_id,
                why,
            },
        }
    }

    /// The log line of a complete (re)list: how it was done and how long it took.
    fn log_sync_done(&mut self, now: Instant) {
        let Some(sync) = self.sync.take() else {
            return;
        };
        let took = now.saturating_duration_since(sync.started);
        let how = match self.state {
            WatchState::Watching { .. } => "a streaming list (watch-list)".to_string(),
            _ => format!(
                "a paginated list ({} page{} of at most {})",
                sync.pages,
                if sync.pages == 1 { "" } else { "s" },
                self.config.page_size
            ),
        };
        log::info!(
            "node list complete: {} nodes by {how} in {:.3} s",
            sync.items,
            took.as_secs_f64()
        );
    }

    /// The watch request was answered: `Ok` means the stream is open. For a streaming
    /// list, returns the `Init` that begins the list once its stream is open.
    pub fn on_watch_started(
        &mut self,
        result: Result<(), &KubeError>,
        now: Instant,
    ) -> Vec<NodeEvent> {
        if matches!(
            self.state,
            WatchState::Empty | WatchState::InitialEvents { .. }
        ) {
            return self.on_watch_list_started(result, now);
        }
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
        Vec::new()
    }

    /// The answer to a streaming list's request.
    fn on_watch_list_started(
        &mut self,
        result: Result<(), &KubeError>,
        now: Instant,
    ) -> Vec<NodeEvent> {
        match result {
            Ok(()) => {
                self.state = WatchState::InitialEvents { last_event: now };
                self.watch_started = Some(now);
                self.lines_in_watch = 0;
                vec![NodeEvent::Init]
            }
            Err(e) if refuses_watch_list(e) => {
                self.fall_back(&format!("the API server refused it ({e})"));
                Vec::new()
            }
            Err(e) => {
                log::warn!("starting the streaming list of nodes failed: {e}; retrying");
                self.state = WatchState::Empty;
                self.fail(now, retry_after(e));
                Vec::new()
            }
        }
    }

    /// Lists from now on, at once (the server is fine; it only does not stream).
    fn fall_back(&mut self, why: &str) {
        log::info!(
            "streaming lists of nodes (watch-list) are off from now on: {why}; using \
             paginated lists of {} instead",
            self.config.page_size
        );
        self.lists_only = true;
        self.state = WatchState::Empty;
        self.not_before = None;
    }

    /// One line of a JSON watch stream (without its newline).
    pub fn on_watch_line(&mut self, line: &[u8], now: Instant) -> LineOutcome {
        if line.iter().all(u8::is_ascii_whitespace) {
            return LineOutcome::Nothing;
        }
        self.lines_in_watch += 1;
        let event = match skim::event(line, self.reads_labels) {
            Some((kind, item)) => Ok(WireEvent::of_node(kind, item)),
            // Not a node event in the shape the skim reads: serde_json decides, with
            // its error if the line is bad.
            None => serde_json::from_slice::<WireEvent>(line).map_err(Undecodable::Json),
        };
        self.on_event(event, line, now)
    }

    /// One frame of a protobuf watch stream (without its length).
    pub fn on_watch_frame(&mut self, frame: &[u8], now: Instant) -> LineOutcome {
        self.lines_in_watch += 1;
        let event = match protobuf::watch_event(frame, self.reads_labels) {
            Ok(Frame::Node(kind, item)) => Ok(WireEvent::of_node(kind, item)),
            Ok(Frame::Bookmark {
                resource_version,
                initial_events_end,
            }) => Ok(WireEvent::Bookmark(Bookmark {
                metadata: BookmarkMeta {
                    resource_version,
                    annotations: BookmarkAnnotations {
                        initial_events_end: initial_events_end.then(|| "true".to_string()),
                    },
                },
            })),
            Ok(Frame::Error(status)) => Ok(WireEvent::Error(status)),
            Ok(Frame::Unknown(kind)) => Err(Undecodable::Protobuf(format!(
                "unknown event type {kind:?}"
            ))),
            Err(e) => Err(Undecodable::Protobuf(format!("malformed event: {e}"))),
        };
        self.on_event(event, frame, now)
    }

    fn on_event(
        &mut self,
        event: Result<WireEvent, Undecodable>,
        raw: &[u8],
        now: Instant,
    ) -> LineOutcome {
        if let WatchState::InitialEvents { last_event } = self.state {
            return self.on_initial_event(event, raw, last_event, now);
        }
        match event {
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
            Ok(WireEvent::Error(status)) => self.error_event(status, now),
            Err(e) => self.bad_line(raw, &e, now),
        }
    }

    /// A line of a streaming list before the end of its initial events: ADDED events
    /// are the list's items (in no resourceVersion order, so none moves the version
    /// on), the end bookmark completes the list.
    fn on_initial_event(
        &mut self,
        event: Result<WireEvent, Undecodable>,
        line: &[u8],
        last_event: Instant,
        now: Instant,
    ) -> LineOutcome {
        let outcome = match event {
            // Progress: the deadline counts from here.
            Ok(WireEvent::Added(item)) => {
                if let Some(sync) = &mut self.sync {
                    sync.items += 1;
                }
                self.state = WatchState::InitialEvents { last_event: now };
                return LineOutcome::Event(self.list_item(item));
            }
            Ok(WireEvent::Bookmark(b)) if b.metadata.annotations.ends_initial_events() => {
                return self.on_initial_events_end(b.metadata.resource_version, now);
            }
            Ok(WireEvent::Bookmark(_)) => LineOutcome::Nothing,
            // A server that honours sendInitialEvents sends only ADDED before the end
            // bookmark; one that ignores it replays the nodes and goes on with changes.
            Ok(WireEvent::Modified(_) | WireEvent::Deleted(_)) => {
                self.fall_back(
                    "the API server sent a change before the end of the initial events, so \
                     it ignores sendInitialEvents",
                );
                return LineOutcome::Restart;
            }
            Ok(WireEvent::Error(status)) => self.error_event(status, now),
            Err(e) => self.bad_line(line, &e, now),
        };
        if matches!(self.state, WatchState::InitialEvents { .. })
            && self.past_deadline(last_event, now)
        {
            self.fall_back_no_end();
            return LineOutcome::Restart;
        }
        outcome
    }

    /// The bookmark annotated `k8s.io/initial-events-end`: the list is complete, and
    /// the same stream goes on as a watch from the bookmark's version.
    fn on_initial_events_end(&mut self, resource_version: String, now: Instant) -> LineOutcome {
        if resource_version.is_empty() {
            log::warn!(
                "the end of the initial node events has no resourceVersion; cannot watch from \
                 it, streaming the list again"
            );
            self.state = WatchState::Empty;
            self.restarts += 1;
            self.fail(now, None);
            return LineOutcome::Restart;
        }
        self.state = WatchState::Watching { resource_version };
        self.backoff.healthy(now);
        self.log_sync_done(now);
        LineOutcome::Event(NodeEvent::InitDone)
    }

    fn past_deadline(&self, last_event: Instant, now: Instant) -> bool {
        now.saturating_duration_since(last_event) >= self.config.initial_events_timeout
    }

    fn fall_back_no_end(&mut self) {
        self.fall_back(&format!(
            "no end of the initial events (the bookmark annotated k8s.io/initial-events-end) \
             {:?} after the last initial event, so the API server ignores sendInitialEvents",
            self.config.initial_events_timeout
        ));
    }

    /// An `ERROR` event: a 410 relists, anything else restarts the stream.
    fn error_event(&mut self, status: Status, now: Instant) -> LineOutcome {
        if status.code == 410 || status.reason == "Expired" || status.reason == "Gone" {
            log::info!(
                "the node watch reported 410 {} ({}); relisting",
                status.reason,
                status.message
            );
            self.relist(now);
        } else {
            log::warn!(
                "the node watch reported an error: {} {} ({}); restarting {}",
                status.code,
                status.reason,
                status.message,
                self.what_restarts()
            );
            self.restart(now);
        }
        LineOutcome::Restart
    }

    /// A line (or frame) that is not a watch event: the stream restarts.
    fn bad_line(&mut self, line: &[u8], e: &Undecodable, now: Instant) -> LineOutcome {
        let problem = match e {
            Undecodable::Json(e) => {
                let kind = serde_json::from_slice::<Probe>(line)
                    .ok()
                    .and_then(|p| p.kind)
                    .unwrap_or_default();
                if !kind.is_empty() && !KNOWN_TYPES.contains(&kind.as_str()) {
                    format!("unknown event type {kind:?}")
                } else {
                    format!("malformed event (type {kind:?}): {e}")
                }
            }
            Undecodable::Protobuf(problem) => format!("{problem} (protobuf)"),
        };
        log::warn!(
            "node watch: {problem}; {} bytes starting {:?}; restarting {}",
            line.len(),
            prefix(line, 200),
            self.what_restarts()
        );
        self.restart(now);
        LineOutcome::Restart
    }

    /// What [`Reflector::restart`] starts again, for log lines.
    fn what_restarts(&self) -> String {
        match &self.state {
            WatchState::InitialEvents { .. } => "the streaming list".into(),
            _ => format!("the watch from resourceVersion {}", self.resource_version()),
        }
    }

    /// The stream ended (or the driver gave up on it).
    pub fn on_watch_end(&mut self, end: WatchEnd, now: Instant) {
        if let WatchState::InitialEvents { last_event } = self.state {
            if self.past_deadline(last_event, now) {
                self.fall_back_no_end();
            } else {
                log::warn!(
                    "the streaming list of nodes ended before its initial events did ({}); \
                     streaming it again",
                    end.describe()
                );
                self.restart(now);
            }
            return;
        }
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
            WatchState::Empty | WatchState::InitPage { .. } | WatchState::InitialEvents { .. } => {
                ""
            }
        }
    }

    fn set_resource_version(&mut self, rv: String) {
        if let WatchState::Watching { resource_version } = &mut self.state {
            *resource_version = rv;
        }
    }

    /// Back to `InitListed` at the last good version, after a backoff; a streaming
    /// list that had not ended starts over (its `Init` drops what it delivered).
    fn restart(&mut self, now: Instant) {
        self.state = match &self.state {
            WatchState::InitialEvents { .. } => WatchState::Empty,
            _ => WatchState::InitListed {
                resource_version: self.resource_version().to_string(),
            },
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

/// Whether the answer to a streaming list's request says the server will not do it:
/// any 4xx (a 422 "sendInitialEvents is forbidden" with the WatchList gate off; an
/// older server rejects `resourceVersionMatch` on a watch) but those that are not
/// about the request's parameters: 401 (credentials), 410 (a relist) and 429 (slow
/// down), which are retried as streaming lists.
fn refuses_watch_list(e: &KubeError) -> bool {
    e.api().is_some_and(|a| {
        (400..500).contains(&a.code)
            && !matches!(
                a.kind(),
                ApiErrorKind::Unauthorized | ApiErrorKind::Gone | ApiErrorKind::TooManyRequests
            )
    })
}

const KNOWN_TYPES: &[&str] = &["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];

/// Why a line or frame is not a watch event.
enum Undecodable {
    Json(serde_json::Error),
    Protobuf(String),
}

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

impl WireEvent {
    fn of_node(kind: EventType, item: LabeledNode) -> WireEvent {
        match kind {
            EventType::Added => WireEvent::Added(item),
            EventType::Modified => WireEvent::Modified(item),
            EventType::Deleted => WireEvent::Deleted(item),
        }
    }
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
    annotations: BookmarkAnnotations,
}

/// The one annotation a bookmark carries, in a streaming list.
#[derive(Deserialize, Default)]
#[serde(default)]
struct BookmarkAnnotations {
    #[serde(rename = "k8s.io/initial-events-end")]
    initial_events_end: Option<String>,
}

impl BookmarkAnnotations {
    fn ends_initial_events(&self) -> bool {
        self.initial_events_end.as_deref() == Some("true")
    }
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
            let streaming = self.reflector.uses_watch_list();
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
                } => self.watch(&watch_path(&resource_version, timeout_seconds)),
                Action::WatchList { timeout_seconds } => {
                    self.watch(&watch_list_path(timeout_seconds))
                }
            };
            // The reflector falls back inside a step (a refused or an ignored
            // streaming list), for good, so this counts it once.
            if streaming && !self.reflector.uses_watch_list() {
                self.metrics.watch_list_fallbacks.inc();
            }
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

    /// Opens a watch (or a streaming list) and reads it to its end.
    fn watch(&mut self, path: &str) -> Result<(), Stopped> {
        let accept = if self.reflector.config().protobuf {
            // JSON where the server has no protobuf for nodes (an aggregated or
            // fake API server): it answers with the first it can.
            "application/vnd.kubernetes.protobuf;stream=watch, application/json"
        } else {
            "application/json"
        };
        let resp = match self.client.get_stream_accepting(path, accept) {
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
        for e in self.reflector.on_watch_started(Ok(()), Instant::now()) {
            self.send(e)?;
        }
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
        let protobuf = resp
            .headers()
            .get("Content-Type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("application/vnd.kubernetes.protobuf"));
        let max = self.reflector.config().max_line;
        let mut reader = BufReader::with_capacity(64 << 10, resp.into_body().into_reader());
        let mut line = Vec::new();
        loop {
            let read = if protobuf {
                read_frame_capped(&mut reader, &mut line, max)
            } else {
                read_line_capped(&mut reader, &mut line, max)
            };
            if self.stop.is_stopped() {
                return Err(Stopped);
            }
            let now = Instant::now();
            let end = match read {
                Ok(ReadLine::Line) => {
                    let outcome = if protobuf {
                        self.reflector.on_watch_frame(&line, now)
                    } else {
                        self.reflector.on_watch_line(&line, now)
                    };
                    match outcome {
                        LineOutcome::Event(e) => {
                            // Only a streaming list completes inside a stream.
                            if e == NodeEvent::InitDone {
                                self.metrics.watch_streaming_lists.inc();
                            }
                            self.send(e)?;
                            continue;
                        }
                        LineOutcome::Nothing => continue,
                        LineOutcome::Restart => return Ok(()),
                    }
                }
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

/// Reads one frame of a protobuf watch (a 4-byte big-endian length, then that many
/// bytes) into `buf`, refusing one longer than `max` before reading it.
fn read_frame_capped(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<ReadLine> {
    buf.clear();
    let mut length = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = r.read(&mut length[got..])?;
        if n == 0 {
            return Ok(if got == 0 {
                ReadLine::Eof
            } else {
                ReadLine::Truncated(got)
            });
        }
        got += n;
    }
    let len = u32::from_be_bytes(length) as usize;
    if len > max {
        return Ok(ReadLine::TooLong(len));
    }
    let read = r.take(len as u64).read_to_end(buf)?;
    Ok(if read < len {
        ReadLine::Truncated(4 + read)
    } else {
        ReadLine::Line
    })
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

/// A watch from `resource_version` (a plain reconnect never asks for initial events).
fn watch_path(resource_version: &str, timeout_seconds: u64) -> String {
    format!(
        "/api/v1/nodes?watch=1&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}",
        encode_query(resource_version)
    )
}

/// A streaming list from a consistent snapshot (no resourceVersion), as client-go's
/// reflector asks for one.
fn watch_list_path(timeout_seconds: u64) -> String {
    format!(
        "/api/v1/nodes?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan\
         &allowWatchBookmarks=true&timeoutSeconds={timeout_seconds}"
    )
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

    /// A reflector on paginated lists (the tests of lists and of the watch after one).
    fn reflector() -> Reflector {
        Reflector::new(WatchConfig {
            seed: Some(7),
            watch_list: false,
            ..WatchConfig::default()
        })
    }

    /// A reflector on streaming lists, as by default.
    fn streaming() -> Reflector {
        Reflector::new(WatchConfig {
            seed: Some(7),
            ..WatchConfig::default()
        })
    }

    fn added(name: &str, rv: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"ADDED","object":{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}}}"#
        )
        .into_bytes()
    }

    fn end_bookmark(rv: &str) -> Vec<u8> {
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"Node","metadata":{{"resourceVersion":"{rv}","annotations":{{"k8s.io/initial-events-end":"true"}}}}}}}}"#
        )
        .into_bytes()
    }

    fn refused() -> KubeError {
        KubeError::Api(crate::kube::ApiError::from_response(
            "GET /api/v1/nodes".into(),
            422,
            None,
            br#"{"kind":"Status","reason":"Invalid","code":422,"message":"ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}"#,
        ))
    }

    fn api_error(code: u16) -> KubeError {
        KubeError::Api(crate::kube::ApiError::from_response(
            "GET /api/v1/nodes".into(),
            code,
            None,
            b"{}",
        ))
    }

    /// Opens a streaming list at `t0` and replays `names`; the end bookmark is not sent.
    fn replaying(r: &mut Reflector, names: &[&str], t0: Instant) -> Vec<NodeEvent> {
        assert!(matches!(r.next_action(t0), Action::WatchList { .. }));
        let mut out = r.on_watch_started(Ok(()), t0);
        for n in names {
            match r.on_watch_line(&added(n, "3"), t0) {
                LineOutcome::Event(e) => out.push(e),
                other => panic!("ADDED {n} gave {other:?}"),
            }
        }
        out
    }

    /// Guards the framing of a streaming list: `Init` when the stream opens, `InitApply`
    /// per initial ADDED (not `Added`), `InitDone` only at the end bookmark (a plain
    /// bookmark before it completes nothing), then the same stream is a watch from the
    /// end bookmark's version.
    #[test]
    fn a_streaming_list_is_framed_like_a_paginated_one_and_goes_on_as_a_watch() {
        let t0 = Instant::now();
        let mut r = streaming();
        assert!(r.uses_watch_list());
        let events = replaying(&mut r, &["a", "b"], t0);
        assert_eq!(
            events,
            vec![
                NodeEvent::Init,
                NodeEvent::InitApply(node("a", "3")),
                NodeEvent::InitApply(node("b", "3"))
            ]
        );
        let plain =
            br#"{"type":"BOOKMARK","object":{"kind":"Node","metadata":{"resourceVersion":"40"}}}"#;
        assert_eq!(r.on_watch_line(plain, t0), LineOutcome::Nothing);
        let not_true = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"41","annotations":{"k8s.io/initial-events-end":"false"}}}}"#;
        assert_eq!(r.on_watch_line(not_true, t0), LineOutcome::Nothing);
        assert_eq!(r.state(), &WatchState::InitialEvents { last_event: t0 });
        assert_eq!(
            r.on_watch_line(&end_bookmark("50"), t0),
            LineOutcome::Event(NodeEvent::InitDone)
        );
        assert_eq!(
            r.state(),
            &WatchState::Watching {
                resource_version: "50".into()
            }
        );
        assert_eq!(
            r.on_watch_line(&added("c", "51"), t0),
            LineOutcome::Event(NodeEvent::Added(node("c", "51")))
        );
        // A filtered node is an InitUnselected in the initial events, as in a list.
        let mut r = Reflector::new(WatchConfig {
            seed: Some(7),
            filter: NodeFilter {
                selector: crate::selector::Selector::parse("role=worker").unwrap(),
                own_provider: None,
            },
            ..WatchConfig::default()
        });
        let events = replaying(&mut r, &["infra"], t0);
        assert!(
            matches!(&events[1], NodeEvent::InitUnselected { name, .. } if name == "infra"),
            "{events:?}"
        );
    }

    /// Guards "no complete view before the end bookmark": a stream cut, stalled or
    /// ended after initial events gives no `InitDone`, and the next try (a streaming
    /// list again, after a backoff) starts with `Init`, which drops the partial view.
    #[test]
    fn nothing_before_the_end_bookmark_completes_the_view() {
        let t0 = Instant::now();
        for end in [
            WatchEnd::Clean,
            WatchEnd::Truncated { len: 9 },
            WatchEnd::Failed(api_error(500)),
        ] {
            let mut r = streaming();
            let events = replaying(&mut r, &["a", "b"], t0);
            assert!(!events.contains(&NodeEvent::InitDone));
            let cut = t0 + Duration::from_secs(5);
            r.on_watch_end(end, cut);
            assert_eq!(r.state(), &WatchState::Empty);
            let Action::Wait(until) = r.next_action(cut) else {
                panic!("expected a backoff");
            };
            assert!(matches!(r.next_action(until), Action::WatchList { .. }));
            assert_eq!(r.on_watch_started(Ok(()), until), vec![NodeEvent::Init]);
            assert!(r.uses_watch_list(), "a broken stream is no reason to list");
        }
        // A bad line or a non-410 ERROR event during the initial events: the same.
        for bad in [
            &b"not json"[..],
            br#"{"type":"ERROR","object":{"kind":"Status","code":500,"reason":"InternalError"}}"#,
        ] {
            let mut r = streaming();
            replaying(&mut r, &["a"], t0);
            assert_eq!(r.on_watch_line(bad, t0), LineOutcome::Restart);
            assert_eq!(r.state(), &WatchState::Empty);
            assert!(r.uses_watch_list());
        }
    }

    /// Guards the 410 during the initial events: the partial view is dropped (the
    /// state is `Empty`, so the next stream sends `Init`) and the relist is a streaming
    /// list again, from a consistent snapshot.
    #[test]
    fn a_410_during_the_initial_events_relists_with_a_streaming_list() {
        let t0 = Instant::now();
        let mut r = streaming();
        replaying(&mut r, &["a"], t0);
        let expired = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#;
        assert_eq!(r.on_watch_line(expired, t0), LineOutcome::Restart);
        assert_eq!(r.state(), &WatchState::Empty);
        let Action::Wait(until) = r.next_action(t0) else {
            panic!("expected a backoff");
        };
        assert!(matches!(r.next_action(until), Action::WatchList { .. }));
        assert_eq!(r.on_watch_started(Ok(()), until), vec![NodeEvent::Init]);
        assert!(!watch_list_path(300).contains("resourceVersion="));
    }

    /// Guards kube-rs's bug #1844: a reconnect after the end bookmark (a clean end,
    /// a stall) is a plain watch from the last version, never a new streaming list;
    /// only a 410 relists, and that relist streams again.
    #[test]
    fn a_reconnect_after_the_end_bookmark_does_not_ask_for_initial_events_again() {
        let t0 = Instant::now();
        let mut r = streaming();
        replaying(&mut r, &["a"], t0);
        r.on_watch_line(&end_bookmark("50"), t0);
        let later = t0 + Duration::from_secs(400);
        r.on_watch_end(WatchEnd::Clean, later);
        assert!(matches!(
            r.next_action(later),
            Action::Watch { resource_version, .. } if resource_version == "50"
        ));
        r.on_watch_started(Ok(()), later);
        r.on_watch_end(WatchEnd::IdleTimeout, later);
        let Action::Wait(until) = r.next_action(later) else {
            panic!("expected a backoff");
        };
        assert!(matches!(r.next_action(until), Action::Watch { .. }));
        assert_eq!(r.on_watch_started(Ok(()), until), vec![]);
        r.on_watch_started(Err(&gone()), until);
        let Action::Wait(until) = r.next_action(until) else {
            panic!("expected a backoff");
        };
        assert!(matches!(r.next_action(until), Action::WatchList { .. }));
        let plain = watch_path("50", 300);
        assert!(!plain.contains("sendInitialEvents"), "{plain}");
        let list = watch_list_path(300);
        for part in [
            "watch=1",
            "sendInitialEvents=true",
            "resourceVersionMatch=NotOlderThan",
            "allowWatchBookmarks=true",
        ] {
            assert!(list.contains(part), "{list} lacks {part}");
        }
    }

    /// Guards the fallback on refusal: a 4xx that is about the request (422 with the
    /// WatchList gate off, 400, 403, 404) lists at once, and every later relist lists
    /// too; 401, 429 and 5xx are retried as streaming lists after a backoff.
    #[test]
    fn a_refused_streaming_list_falls_back_to_paginated_lists_for_good() {
        let t0 = Instant::now();
        for e in [refused(), api_error(400), api_error(403), api_error(404)] {
            let mut r = streaming();
            assert!(matches!(r.next_action(t0), Action::WatchList { .. }));
            assert_eq!(r.on_watch_started(Err(&e), t0), vec![]);
            assert!(!r.uses_watch_list());
            assert_eq!(
                r.next_action(t0),
                Action::List {
                    continue_token: None
                },
                "no backoff before the list"
            );
            r.on_list_page(Ok(page(&["a"], "9", "")), t0);
            r.on_watch_started(Ok(()), t0);
            assert_eq!(
                r.on_watch_line(&added("b", "10"), t0),
                LineOutcome::Event(NodeEvent::Added(node("b", "10")))
            );
            r.on_watch_line(
                br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#,
                t0,
            );
            let Action::Wait(until) = r.next_action(t0) else {
                panic!("expected a backoff");
            };
            assert_eq!(
                r.next_action(until),
                Action::List {
                    continue_token: None
                },
                "after a fallback, relists list too"
            );
        }
        for code in [401, 429, 500, 503] {
            let mut r = streaming();
            r.next_action(t0);
            r.on_watch_started(Err(&api_error(code)), t0);
            assert!(r.uses_watch_list(), "{code}");
            let Action::Wait(until) = r.next_action(t0) else {
                panic!("expected a backoff after {code}");
            };
            assert!(matches!(r.next_action(until), Action::WatchList { .. }));
        }
    }

    /// Guards the deadline, in virtual time: a server that replays the nodes but
    /// never sends the end bookmark is listed once `initial_events_timeout` has passed
    /// since the last initial event (noticed at the next line or at the stream's end),
    /// and for good; a slow replay that keeps sending nodes is never cut.
    #[test]
    fn a_server_that_never_ends_the_initial_events_is_listed_after_the_deadline() {
        let t0 = Instant::now();
        let timeout = WatchConfig::default().initial_events_timeout;
        let almost = timeout - Duration::from_millis(1);
        let plain = br#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"40"}}}"#;
        let mut r = streaming();
        replaying(&mut r, &["a"], t0);
        // A slow replay: a node every `almost`, five times the deadline in all.
        let mut at = t0;
        for _ in 0..5 {
            at += almost;
            assert!(matches!(
                r.on_watch_line(&added("b", "4"), at),
                LineOutcome::Event(NodeEvent::InitApply(_))
            ));
        }
        assert_eq!(r.on_watch_line(plain, at + almost), LineOutcome::Nothing);
        assert!(r.uses_watch_list());
        assert_eq!(r.on_watch_line(plain, at + timeout), LineOutcome::Restart);
        assert!(!r.uses_watch_list());
        assert_eq!(
            r.next_action(at + timeout),
            Action::List {
                continue_token: None
            }
        );
        // A stream that goes silent: the idle timeout ends it past the deadline.
        let mut r = streaming();
        replaying(&mut r, &["a"], t0);
        r.on_watch_end(WatchEnd::IdleTimeout, t0 + 2 * timeout);
        assert!(!r.uses_watch_list());
        // The end bookmark that comes late but on the deadline's line still counts.
        let mut r = streaming();
        replaying(&mut r, &["a"], t0);
        assert_eq!(
            r.on_watch_line(&end_bookmark("7"), t0 + timeout),
            LineOutcome::Event(NodeEvent::InitDone)
        );
        assert!(r.uses_watch_list());
    }

    /// Guards the other sign of a server that ignores `sendInitialEvents`: a change
    /// (MODIFIED, DELETED) before the end bookmark, which such a server sends after
    /// its replay; the reflector lists at once, for good.
    #[test]
    fn a_change_before_the_end_bookmark_means_the_server_ignores_initial_events() {
        let t0 = Instant::now();
        for kind in ["MODIFIED", "DELETED"] {
            let mut r = streaming();
            replaying(&mut r, &["a"], t0);
            let line = format!(
                r#"{{"type":"{kind}","object":{{"metadata":{{"name":"a","resourceVersion":"5"}}}}}}"#
            );
            assert_eq!(r.on_watch_line(line.as_bytes(), t0), LineOutcome::Restart);
            assert!(!r.uses_watch_list());
            assert_eq!(
                r.next_action(t0),
                Action::List {
                    continue_token: None
                }
            );
        }
    }

    #[test]
    fn with_watch_list_off_the_reflector_lists() {
        let mut r = reflector();
        assert!(!r.uses_watch_list());
        assert_eq!(
            r.next_action(Instant::now()),
            Action::List {
                continue_token: None
            }
        );
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
    /// A protobuf stream's frames: whole, cut short inside the length or the frame,
    /// and one over the cap refused before it is read.
    #[test]
    fn protobuf_frames_are_read_by_their_length_and_capped() {
        let mut stream: &[u8] = &[0, 0, 0, 2, b'o', b'k', 0, 0, 0, 9, b'x', 0, 0];
        let mut frame = Vec::new();
        assert_eq!(
            read_frame_capped(&mut stream, &mut frame, 100).unwrap(),
            ReadLine::Line
        );
        assert_eq!(frame, b"ok");
        assert_eq!(
            read_frame_capped(&mut stream, &mut frame, 100).unwrap(),
            ReadLine::Truncated(7)
        );
        assert_eq!(
            read_frame_capped(&mut stream, &mut frame, 100).unwrap(),
            ReadLine::Eof
        );
        let mut cut: &[u8] = &[0, 0];
        assert_eq!(
            read_frame_capped(&mut cut, &mut frame, 100).unwrap(),
            ReadLine::Truncated(2)
        );
        let mut long: &[u8] = &[0, 1, 0, 0, b'x'];
        assert_eq!(
            read_frame_capped(&mut long, &mut frame, 100).unwrap(),
            ReadLine::TooLong(65536)
        );
    }

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
                initial_events in any::<bool>(),
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
                    if initial_events {
                        // The lines as a streaming list's initial events.
                        r.on_watch_started(Ok(()), t0);
                    } else {
                        watching(&mut r, t0);
                    }
                    for line in &lines {
                        let _ = r.on_watch_line(line, t0);
                    }
                    let _ = r.next_action(t0);
                });
            }

            /// A protobuf watch stream (frames a kube-apiserver 1.37 sent: a node
            /// ADDED and the end bookmark), cut into frames and read, with a node
            /// filter or without.
            #[test]
            fn watch_frames(stream in bytes(FRAMES), filtered in any::<bool>(), initial_events in any::<bool>()) {
                check("the watch's frame reader", move || {
                    let t0 = Instant::now();
                    let mut r = Reflector::new(WatchConfig {
                        seed: Some(7),
                        filter: NodeFilter {
                            selector: crate::selector::Selector::parse(if filtered { "a=b" } else { "" })
                                .expect("a valid selector"),
                            own_provider: None,
                        },
                        ..WatchConfig::default()
                    });
                    if initial_events {
                        r.on_watch_started(Ok(()), t0);
                    } else {
                        watching(&mut r, t0);
                    }
                    let mut reader = std::io::Cursor::new(stream);
                    let mut frame = Vec::new();
                    while let Ok(ReadLine::Line) = read_frame_capped(&mut reader, &mut frame, 4096) {
                        let _ = r.on_watch_frame(&frame, t0);
                    }
                    let _ = r.next_action(t0);
                });
            }
        }

        static FRAMES: &[&[u8]] = &[fuzz_seed!("watch-frames.pb")];
    }
}
