//! The reconcile controller: a sans-IO state machine.
//!
//! [`Controller::handle`] takes one [`Input`] (a node event, a cloud reply, a status
//! reply, a leadership change, or just the passing of time) and the current instant,
//! and returns the [`Command`]s to carry out: cloud operations, condition writes,
//! events and pass reports. [`Controller::next_deadline`] says when it next wants to
//! be called even if nothing arrives. It never reads a clock, opens a socket or starts
//! a thread, so tests drive it step by step in virtual time.
//!
//! How a pass works:
//! 1. Triggers (node changes, timers, retries) collect in a [`Scheduler`] that decides
//!    when the next pass may start. One pass runs at a time; triggers that arrive
//!    during a pass fold into one follow-up.
//! 2. The pass lists the cloud routes unless its view of them is fresh and no
//!    ambiguous reply has been seen since the last list.
//! 3. The planner turns nodes and routes into deletes and creates. Operations queue per
//!    destination CIDR, a delete before the create that replaces it, and at most one
//!    operation per destination and `max_in_flight` in total are dispatched, each only
//!    when the cloud's budget lets it go out at once. A provider that batches gets
//!    them as one operation of several changes, one such write in flight at a time.
//! 4. As each node's creates resolve, its `NetworkUnavailable` condition is written
//!    from what the cloud now holds. When every operation has resolved the pass ends
//!    with a [`PassReport`].
//!
//! Safety rules kept here: no delete is dispatched while the node view is incomplete
//! (after start or during a relist), no route outside the cluster CIDRs is deleted
//! (the planner), and nothing is written unless this replica leads.
//!
//! This file reads top-down: construction, `handle`, starting a pass, planning and
//! queueing, replies; `dispatch` sends, and `batches` sends for a provider that
//! batches. The parts own their state: `nodes` (the node view), `scheduler`
//! (coalescing and periodic timers), `passes` (reports), `ops` (the queue), `budget`,
//! `retries`, `conditions`, `view` (the cloud's routes); `timers` reads every timer
//! into one table whose earliest entry is `next_deadline`; `messages` is the
//! vocabulary.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::{Metrics, SyncOutcome};
use crate::model::{Cidr, Node, Route};
use crate::plan::{self, Plan};
use crate::provider::{CloudError, CloudErrorKind};

mod batches;
mod budget;
mod cause;
mod compact;
mod conditions;
mod config;
mod dispatch;
mod known;
mod lifecycle;
mod messages;
mod nodes;
mod ops;
mod passes;
mod refusals;
mod report;
mod retries;
mod scheduler;
mod tables;
mod timers;
mod view;

pub use cause::{Cause, Trigger};
pub use config::{Config, Mode};
pub use messages::{
    CloudJob, CloudOp, CloudReply, Command, Exit, Input, NodeEvent, NodeEventRecord, OpId,
    StatusRequest, WriteError,
};
pub use report::PassReport;
pub use view::RouteList;

use budget::{Cost, Spending};
use conditions::Conditions;
use known::Known;
use nodes::NodeView;
use ops::{OpKind, Operations, Planned, Queued};
use passes::Passes;
use refusals::Refusals;
use retries::Retries;
use scheduler::Scheduler;
use tables::Tables;
use view::RouteView;

// ---------------------------------------------------------------------------------

/// The sans-IO reconcile state machine. See the module documentation.
pub struct Controller {
    config: Config,
    metrics: Arc<Metrics>,

    nodes: NodeView,

    view: Option<RouteView>,

    leading: bool,
    shutting_down: bool,
    /// After a shutdown: when the drain gives up on what is still in flight.
    drain_until: Option<Instant>,
    /// [`Command::Exit`] was emitted.
    exited: bool,
    /// After gaining the lease: when the previous leader's last request has timed
    /// out and the routes are listed again (`Config::handover_relist`).
    handover_at: Option<Instant>,

    scheduler: Scheduler,
    /// The pass waiting for its list of routes, if any; one at a time.
    planning: Option<Planning>,
    /// Passes whose operations have not all been answered yet.
    passes: Passes,
    next_timer: Option<Instant>,
    resync_period: Duration,

    next_op: OpId,
    ops: Operations,
    /// The cloud's budget: what may be sent when.
    spending: Spending,
    /// The instant of the last input, for `next_deadline`.
    now: Option<Instant>,
    retries: Retries,
    /// Destinations a pass wanted to change while an operation on them was in flight;
    /// when it is answered, a follow-up pass looks again.
    followups: HashSet<Cidr>,

    conditions: Conditions,
    /// Room in the route tables, and the creates held for want of it.
    tables: Tables,
    /// Creates the provider refused before sending them.
    refusals: Refusals,
    /// The batch of changes in flight, for a provider that batches.
    batch: Option<batches::Batch>,
    /// The search for a change at fault in a batch the cloud refused whole, and the
    /// changes it refused, which go alone.
    splitting: batches::Splitting,
    /// The last plan did nothing (see [`Quiet`]), and nothing it reads has changed
    /// since: a list that shows the same routes would plan the same nothing.
    quiet: Option<Quiet>,
    /// Something a plan reads may have changed since the last plan: every input but
    /// the passing of time, a list, and a node event that changed only the node's
    /// resourceVersion (a heartbeat). Kept on the safe side: it may say so when
    /// nothing did.
    changed: bool,
    /// Condition decisions that wrote or marked something, for [`Quiet`].
    condition_effects: u64,
}

/// A plan that found nothing to do: no operation, no problem, no condition to write
/// or node to mark. In poll mode most passes are such, at every node every 10 s;
/// the next pass that lists the same routes with nothing else changed skips
/// planning, so that a steady cluster costs a list and a comparison per pass.
#[derive(Clone, Copy, Debug)]
struct Quiet {
    /// The routes the plan kept, for the pass report.
    kept: usize,
}

/// A pass that needs a list before it can plan.
struct Planning {
    pass: u64,
    /// The list, once sent. It waits until no route operation is in flight, so that
    /// the list shows their outcome.
    list: Option<OpId>,
}

impl Controller {
    /// A controller with `config`, recording into `metrics`.
    pub fn new(config: Config, metrics: Arc<Metrics>) -> Controller {
        let mut retries = Retries::new(config.retry_initial, config.retry_max, config.seed);
        // Drawn once, as upstream's informer factory does: [min, 2 × min).
        let resync_period = config.min_resync_period.mul_f64(1.0 + retries.draw());
        let leading = !config.leader_election;
        metrics.leader.set(i64::from(leading));
        let scheduler = Scheduler::new(config.mode);
        let spending = Spending::new(config.budget);
        Controller {
            config,
            metrics,
            nodes: NodeView::default(),
            view: None,
            leading,
            shutting_down: false,
            drain_until: None,
            exited: false,
            handover_at: None,
            scheduler,
            planning: None,
            passes: Passes::default(),
            next_timer: None,
            resync_period,
            next_op: 1,
            ops: Operations::default(),
            spending,
            now: None,
            retries,
            followups: HashSet::new(),
            conditions: Conditions::default(),
            tables: Tables::default(),
            refusals: Refusals::default(),
            batch: None,
            splitting: batches::Splitting::default(),
            quiet: None,
            changed: true,
            condition_effects: 0,
        }
    }

    /// The settings it was built with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The registry it records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The full-resync period drawn at construction (watch mode).
    pub fn resync_period(&self) -> Duration {
        self.resync_period
    }

    /// Whether a complete node list has been seen and no relist is in progress.
    pub fn is_synced(&self) -> bool {
        self.nodes.is_synced()
    }

    /// Whether this replica may write (holds the lease, or runs without election).
    pub fn is_leading(&self) -> bool {
        self.leading
    }

    /// No write is in flight (route create or delete, condition): after
    /// [`Input::Shutdown`], the drivers may stop. A list in flight is not waited for:
    /// its answer would only feed a pass that will not run, and a list of many pages
    /// from a slow or rate-limited cloud can take most of the drain.
    pub fn is_idle(&self) -> bool {
        self.ops.mutations_in_flight() == 0 && self.conditions.is_idle()
    }

    /// The nodes as the controller sees them (a condition without its message: the
    /// view does not keep it).
    pub fn nodes(&self) -> impl Iterator<Item = Node> + '_ {
        self.nodes.nodes().map(Known::to_node)
    }

    /// The routes the controller believes the cloud holds, if it has listed them
    /// (copies: the view keeps them compact).
    pub fn routes(&self) -> Option<Vec<Route>> {
        self.view.as_ref().map(RouteView::to_routes)
    }

    /// Feeds one input at `now` and returns what to do. The commands must be carried
    /// out (or deliberately dropped): the controller counts them as sent.
    #[must_use = "the commands are what the controller decided; carry them out"]
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Command> {
        let mut out = Vec::new();
        if let Input::Tick = input {
            self.log_wake(now);
        }
        self.now = Some(now);
        // A list is judged when it is read (`on_listed`), its tables and a node event
        // when stored (`on_tables`, the view); what a call spent changes the budget
        // only, which no plan reads.
        if !matches!(
            input,
            Input::Tick
                | Input::Cloud {
                    reply: CloudReply::Listed(Ok(_)) | CloudReply::Spent(_) | CloudReply::Tables(_),
                    ..
                }
                | Input::Node(NodeEvent::Added(_) | NodeEvent::Modified(_))
        ) {
            self.changed = true;
        }
        match input {
            Input::Node(event) => self.on_node_event(event, now, &mut out),
            Input::Cloud { id, reply } => self.on_cloud_reply(id, reply, now, &mut out),
            Input::ConditionWritten { node, result } => {
                self.on_condition_written(node, result, now)
            }
            Input::Leadership(leading) => self.on_leadership(leading, now, &mut out),
            Input::Tick => {}
            Input::Shutdown => self.on_shutdown(now, &mut out),
        }
        self.advance(now, &mut out);
        self.maybe_exit(now, &mut out);
        out
    }

    fn can_write(&self) -> bool {
        self.leading && self.nodes.is_synced() && !self.shutting_down
    }

    /// Passes overlap in our watch mode: a pass plans while earlier passes' operations
    /// are still queued or in flight. Upstream's modes run one pass at a time, each
    /// waiting for all of its operations.
    fn overlapping(&self) -> bool {
        self.config.mode == Mode::Watch
    }

    fn may_start_pass(&self) -> bool {
        self.planning.is_none() && (self.overlapping() || self.passes.none_open())
    }

    /// A pass is "running" for coalescing while it plans (or, in upstream's modes,
    /// until its operations are done).
    fn pass_running(&self) -> bool {
        !self.may_start_pass()
    }

    // --- triggers and timers ------------------------------------------------------

    /// Node changes trigger passes only in the watch modes, and only once synced.
    fn node_trigger(&mut self, trigger: Trigger, now: Instant) {
        if self.config.mode == Mode::Poll || !self.nodes.is_synced() {
            return;
        }
        self.trigger(trigger, now);
    }

    fn trigger(&mut self, trigger: Trigger, now: Instant) {
        self.metrics.trigger(trigger.kind());
        if self.scheduler.has_pending() || self.pass_running() {
            self.metrics.triggers_coalesced.inc();
        }
        let busy = self.pass_running();
        self.scheduler.trigger(trigger, now, busy, &self.config);
    }

    /// Runs whatever is due at `now`: timers, retries, the next pass, sending.
    fn advance(&mut self, now: Instant, out: &mut Vec<Command>) {
        if !self.can_write() {
            return;
        }
        if self.next_timer.is_some_and(|t| t <= now) {
            self.fire_timer(now);
        }
        self.handover_due(now);
        if self.retries.list_due(now) {
            self.trigger(Trigger::ListRetry, now);
        }
        for cidr in self.retries.due_routes(now) {
            self.trigger(Trigger::RouteRetry(cidr), now);
        }
        for node in self.conditions.due(now) {
            self.changed = true;
            self.write_condition(&node, None, out);
        }
        self.scheduler.advance(now);
        let paused = self.pass_paused(now).is_some();
        if self.may_start_pass()
            && !paused
            && self.scheduler.due(&self.config).is_some_and(|d| d <= now)
        {
            self.start_pass(now, out);
        }
        self.dispatch(now, out);
    }

    // --- passes -------------------------------------------------------------------

    fn start_pass(&mut self, now: Instant, out: &mut Vec<Command>) {
        let Some(batch) = self.scheduler.take(now) else {
            return;
        };
        let (pass, cause) = self.passes.start(batch.cause, self.config.mode, now);
        self.metrics.pass_started(cause.primary());
        for t in &batch.times {
            self.metrics
                .trigger_to_pass
                .observe(now.saturating_duration_since(*t));
        }
        if self.config.mode == Mode::Poll {
            self.next_timer = Some(now + self.config.route_reconciliation_period);
        }
        let must_list = match (&self.view, self.config.mode) {
            (_, Mode::Poll | Mode::UpstreamWatch) => true,
            (None, _) => true,
            (Some(view), Mode::Watch) => {
                // Age alone does not interrupt a stream of operations: while they run,
                // the view is kept current by their replies.
                let aged =
                    now.saturating_duration_since(view.listed_at) >= self.config.route_view_max_age;
                batch.force_list || view.stale || (aged && self.ops.is_idle())
            }
        };
        if must_list {
            self.planning = Some(Planning { pass, list: None });
            // The list goes out from dispatch, once no route operation is in flight.
        } else {
            self.plan_and_queue(pass, now, out);
        }
    }

    /// Plans with the current views and replaces what is queued with the new plan.
    fn plan_and_queue(&mut self, pass: u64, now: Instant, out: &mut Vec<Command>) {
        self.quiet = None;
        self.changed = false;
        let effects_before = self.condition_effects;
        let Some(view) = &self.view else { return };
        let unselected = self.nodes.unselected();
        let unrouted = plan::UnroutedNodes {
            contains: &|name| unselected.contains_key(name),
            delete_routes: self.config.delete_routes_of_unselected_nodes,
        };
        let plan = plan::plan_with_unrouted(
            self.nodes.nodes(),
            view.kept(),
            &self.config.cluster_cidrs,
            unrouted,
        );
        let Plan {
            deletes,
            creates,
            nodes,
            kept,
            problems,
            unselected: _,
        } = plan;
        // The plan borrows the nodes' names from the view; the conditions below are
        // written by name through `&mut self`, so each name is found again by its
        // place in the view (which the pass does not reorder).
        let positions = self.nodes.positions_in_order(nodes.iter().map(|r| r.node));
        let routings: Vec<(u32, bool)> = positions
            .into_iter()
            .zip(&nodes)
            .filter_map(|(at, r)| Some((at?, r.routable)))
            .collect();
        drop(nodes);
        for p in &problems {
            log::warn!("{p} (pass {pass})");
        }
        let planned: Vec<Planned> = deletes
            .into_iter()
            .map(|d| Planned::Delete(Box::new(d)))
            .chain(creates.into_iter().map(Planned::Create))
            .collect();
        let wanted: HashSet<Cidr> = planned.iter().map(Planned::cidr).collect();

        // The new plan is authoritative for every destination without an operation in
        // flight: queued operations it does not repeat are dropped.
        let nothing_planned = planned.is_empty() && problems.is_empty();
        let (superseded, already_queued) = self.ops.supersede(&planned);
        let nothing_planned = nothing_planned && superseded.is_empty();
        for q in superseded {
            self.passes.resolve(q.pass, |r| r.deferred += 1);
        }
        let retry_mode = self.config.mode == Mode::Watch;
        let mut deferred = 0;
        for (op, queued) in planned.into_iter().zip(already_queued) {
            let cidr = op.cidr();
            if let Planned::Create(c) = &op {
                self.nodes.route_planned(&c.node, cidr, now);
            }
            if queued {
                continue;
            }
            if self.ops.is_busy(&cidr) {
                // The operation in flight may already be the one planned; only a
                // different wish needs another look once it is answered.
                if !self.ops.is_in_flight(&op) {
                    self.followups.insert(cidr);
                    deferred += 1;
                }
                continue;
            }
            // Poll mode never holds a route back past a poll: its retry only comes
            // sooner than the next one.
            if retry_mode && self.retries.backing_off(cidr, now) {
                deferred += 1;
                continue;
            }
            if let Some(OpKind::Create(request)) = self.request_for(&op)
                && self.refusals.holds_back(&request)
            {
                // Refused before any request, and nothing changed since: it would be
                // refused again.
                deferred += 1;
                continue;
            }
            // This pass tries the route again: its retry, if one is still to come,
            // would only start another pass for it.
            self.retries.taken(cidr);
            self.ops.enqueue(op, pass);
            self.passes.queued(pass);
        }
        // Retries for routes the plan no longer needs are moot.
        self.retries.keep_wanted(&wanted);
        self.tables.keep_wanted(&wanted);
        self.refusals.keep_wanted(&wanted);
        self.splitting.keep_wanted(&wanted);
        if let Some(r) = self.passes.report(pass) {
            r.kept = kept;
            r.deferred += deferred;
            r.problems = problems.iter().map(ToString::to_string).collect();
        }
        for (at, routable) in routings {
            let waits = self
                .nodes
                .name_at(at)
                .is_some_and(|node| self.ops.pending_creates(node) > 0);
            if !waits
                && self.write_condition_at(at, Some(routable), out)
                && let Some(r) = self.passes.report(pass)
            {
                r.conditions += 1;
            }
        }
        if nothing_planned && self.condition_effects == effects_before && self.ops.is_idle() {
            self.quiet = Some(Quiet { kept });
        }
        self.maybe_finish(pass, now, out);
    }

    /// Emits the report of `pass` once it has planned and all its operations are done.
    fn maybe_finish(&mut self, pass: u64, now: Instant, out: &mut Vec<Command>) {
        if self.planning.as_ref().is_some_and(|p| p.pass == pass) {
            return;
        }
        let Some(report) = self.passes.finish(pass, now) else {
            return;
        };
        let outcome = if report.list_error.is_some() {
            SyncOutcome::Error
        } else if report.created + report.deleted > 0 {
            SyncOutcome::Changed
        } else {
            SyncOutcome::Noop
        };
        self.metrics.pass_finished(report.cause.primary(), outcome);
        self.update_route_gauges();
        out.push(Command::PassFinished(report));
    }

    fn update_route_gauges(&self) {
        let wanted = self.nodes.wanted_routes() as i64;
        let pending = (self.ops.queued() + self.ops.mutations_in_flight()) as i64;
        let failing = self.retries.failing() as i64;
        self.metrics.routes_pending.set(pending);
        self.metrics.routes_failing.set(failing);
        self.metrics
            .routes_ok
            .set((wanted - pending - failing).max(0));
    }

    /// Gives up the pass waiting for its list (lost lease, shutdown).
    fn abandon_planning(&mut self, now: Instant, out: &mut Vec<Command>) {
        if self.planning.as_ref().is_none_or(|p| p.list.is_some()) {
            return; // a list in flight ends the planning when it is answered
        }
        let Some(planning) = self.planning.take() else {
            return;
        };
        if let Some(r) = self.passes.report(planning.pass) {
            r.list_error = Some("cancelled before listing".into());
        }
        self.maybe_finish(planning.pass, now, out);
    }

    /// Drops everything queued and not yet sent (relist, lost lease, shutdown). The
    /// next pass plans afresh.
    fn cancel_queued(&mut self, now: Instant, out: &mut Vec<Command>) {
        let cancelled = self.ops.retain_queued(|_| false);
        let mut passes = BTreeSet::new();
        for q in cancelled {
            passes.insert(q.pass);
            self.passes.resolve(q.pass, |r| r.deferred += 1);
        }
        for pass in passes {
            self.maybe_finish(pass, now, out);
        }
    }

    fn on_cloud_reply(
        &mut self,
        id: OpId,
        reply: CloudReply,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        if let CloudReply::Spent(usage) = &reply {
            return self.on_spent(id, usage, now);
        }
        if let CloudReply::Tables(tables) = reply {
            // Belongs to the list `id`, whose reply follows.
            self.on_tables(tables);
            return;
        }
        self.spending.answering(id);
        if self.is_batch(id) {
            return self.on_applied(reply, now, out);
        }
        let Some(flight) = self.ops.complete(id) else {
            log::warn!("reply for unknown cloud operation {id} ignored");
            return;
        };
        let pass = flight.pass;
        let fenced = matches!(
            &reply,
            CloudReply::Listed(Err(e)) if e.kind == CloudErrorKind::Fenced
        ) || matches!(&reply, CloudReply::Done(Err(e)) if e.kind == CloudErrorKind::Fenced);
        match (flight.kind, reply) {
            (None, CloudReply::Listed(result)) => {
                self.on_listed(pass, result, flight.sent, now, out)
            }
            (Some(op), CloudReply::Done(result)) => {
                self.on_op_done(op, pass, result, flight.sent, now, out)
            }
            (kind, reply) => {
                log::error!(
                    "cloud operation {id} got a reply of the wrong shape ({reply:?}); treating it as ambiguous"
                );
                match kind {
                    Some(op) => {
                        let e = Err(CloudError::ambiguous("mismatched reply"));
                        self.on_op_done(op, pass, e, flight.sent, now, out);
                    }
                    None => self.on_listed(
                        pass,
                        Err(CloudError::ambiguous("mismatched reply")),
                        flight.sent,
                        now,
                        out,
                    ),
                }
            }
        }
        self.maybe_finish(pass, now, out);
        if fenced {
            // The fence closes before the lease thread can say so (its deadline
            // passed while a renewal hung): the lease is as good as lost.
            self.on_leadership(false, now, out);
        }
    }

    fn on_listed(
        &mut self,
        pass: u64,
        result: Result<RouteList, CloudError>,
        sent: Instant,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        if self.planning.as_ref().is_some_and(|p| p.pass == pass) {
            self.planning = None;
        }
        match result {
            Ok(routes) => {
                self.retries.list_done();
                if self.can_write()
                    && let Some(quiet) = self.quiet
                    && !self.changed
                    && let Some(view) = self.view.as_mut()
                    && !view.stale
                    && view.routes.same_routes(&routes)
                {
                    // The same routes, and nothing else changed: the plan would be the
                    // same nothing (see `Quiet`).
                    view.listed_at = sent;
                    if let Some(r) = self.passes.report(pass) {
                        r.kept = quiet.kept;
                        r.unchanged = true;
                    }
                    return;
                }
                // Age the view from when the list was sent: anything changed by others
                // after that instant may be missing.
                self.view = Some(RouteView::new(routes, sent));
                if self.can_write() {
                    self.plan_and_queue(pass, now, out);
                } else if let Some(r) = self.passes.report(pass) {
                    // A relist began, or the lease was lost, while listing: the pass
                    // after InitDone (or the new leader) plans instead.
                    r.list_error = Some(
                        "not planned: the node view is relisting or the lease was lost".into(),
                    );
                }
            }
            Err(err) => {
                if let CloudErrorKind::RateLimited { after } = err.kind {
                    self.spending.throttled_answer(Cost::List, after, now);
                }
                if let Some(r) = self.passes.report(pass) {
                    r.list_error = Some(err.message.clone());
                }
                self.list_failed(&err, now);
            }
        }
    }

    fn list_failed(&mut self, err: &CloudError, now: Instant) {
        if err.kind == CloudErrorKind::Fenced {
            return; // never retried (see schedule_retry)
        }
        match self.config.mode {
            // Upstream requeues through its rate limiter.
            Mode::UpstreamWatch => self.trigger(Trigger::ListRetry, now),
            // In poll mode the retry starts an early pass when it comes before the
            // next poll: a failed first list no longer leaves every node unrouted
            // for a whole period.
            Mode::Watch | Mode::Poll if self.retries_failures() => {
                self.retries.list_failed(err.kind, now)
            }
            // Upstream's poll mode: the next poll retries.
            Mode::Watch | Mode::Poll => {}
        }
    }

    fn on_op_done(
        &mut self,
        op: OpKind,
        pass: u64,
        result: Result<(), CloudError>,
        sent: Instant,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let cidr = op.cidr();
        let created = matches!(op, OpKind::Create(_)) && result.is_ok();
        let deleted = matches!(op, OpKind::Delete(_))
            && result
                .as_ref()
                .err()
                .is_none_or(|e| e.kind == CloudErrorKind::NotFound);
        match (&op, result) {
            (OpKind::Create(c), Ok(())) => {
                if let Some(view) = &mut self.view {
                    let enable_node_addresses = view.reports_addresses;
                    view.insert(&Route {
                        enable_node_addresses,
                        ..c.route.clone()
                    });
                }
                self.retries.route_done(cidr);
                if let Some(took) = self.nodes.route_created(&c.route.target_node, cidr, now) {
                    self.metrics.node_to_route.observe(took);
                }
                self.tables.created(cidr);
                self.tables.release(cidr);
                self.refusals.forget(cidr);
                self.splitting.settled(cidr);
                self.conditions.clear_reason(&c.route.target_node);
                self.update_table_gauges();
                self.passes.resolve(pass, |r| r.created += 1);
            }
            (OpKind::Delete(d), Ok(())) => {
                self.forget_route(&d.route, cidr);
                self.retries.route_done(cidr);
                self.splitting.settled(cidr);
                self.passes.resolve(pass, |r| r.deleted += 1);
                self.room_freed(cidr, now);
            }
            (OpKind::Delete(d), Err(e)) if e.kind == CloudErrorKind::NotFound => {
                self.forget_route(&d.route, cidr);
                self.retries.route_done(cidr);
                self.passes.resolve(pass, |r| r.deleted += 1);
                self.room_freed(cidr, now);
            }
            (OpKind::Create(c), Err(e)) if matches!(e.kind, CloudErrorKind::Refused { .. }) => {
                if let CloudErrorKind::Refused { reason, lasting } = e.kind {
                    self.create_refused(c, reason, lasting, &e, pass, out);
                    if lasting {
                        self.retries.route_done(cidr);
                    } else {
                        self.schedule_retry(cidr, CloudErrorKind::Retry { after: None }, now);
                    }
                }
                self.passes.resolve(pass, |r| r.deferred += 1);
            }
            (_, Err(e)) if matches!(e.kind, CloudErrorKind::BatchRefused { .. }) => {
                self.cloud_refused(&op, &e, pass, out);
                if let OpKind::Delete(_) = &op {
                    self.hold_create_behind(cidr, now, out);
                }
                self.schedule_retry(cidr, CloudErrorKind::Invalid, now);
                self.passes.resolve(pass, |r| r.failed += 1);
            }
            (OpKind::Create(c), Err(e))
                if e.kind == CloudErrorKind::TableFull && self.config.guard_table_limits =>
            {
                // Another writer filled the table since the list: hold, do not retry.
                log::warn!("create of route {cidr} refused by the cloud: {}", e.message);
                self.tables.cloud_full(cidr);
                self.update_table_gauges();
                self.retries.route_done(cidr);
                self.hold_create(cidr, &c.route.target_node, pass, out);
                self.passes.resolve(pass, |r| r.failed += 1);
            }
            (_, Err(e)) if matches!(e.kind, CloudErrorKind::RateLimited { .. }) => {
                // Not the route's fault: wait out the limit and send it again first.
                if let CloudErrorKind::RateLimited { after } = e.kind {
                    self.spending
                        .throttled_answer(Cost::of(Some(&op)), after, now);
                }
                self.ops.requeue_front(Queued {
                    op: op.planned(),
                    pass,
                });
            }
            (_, Err(e)) => {
                if matches!(
                    e.kind,
                    CloudErrorKind::Ambiguous
                        | CloudErrorKind::AlreadyExists
                        | CloudErrorKind::Fenced
                ) && let Some(view) = &mut self.view
                {
                    view.stale = true;
                }
                if let OpKind::Create(c) = &op {
                    self.failed_create_event(c, pass, &e, now.saturating_duration_since(sent), out);
                }
                if let OpKind::Delete(_) = &op {
                    self.hold_create_behind(cidr, now, out);
                }
                log::warn!(
                    "{} of route {cidr} for node {} failed ({}): {}",
                    if matches!(op, OpKind::Create(_)) {
                        "create"
                    } else {
                        "delete"
                    },
                    if op.node().is_empty() { "-" } else { op.node() },
                    e.kind.outcome(),
                    e.message
                );
                self.schedule_retry(cidr, e.kind, now);
                self.passes.resolve(pass, |r| r.failed += 1);
            }
        }
        // The node may have changed while this create was in flight: gone, the CIDR no
        // longer its, other addresses. A pass in between did not see the route yet,
        // or planned the same create and let this one be; the route gets another look
        // now, not at the resync (unless a pass is due anyway: it plans from the view
        // this reply just updated).
        let pass_due = self.scheduler.has_pending() || self.planning.is_some();
        if created && !pass_due && self.request_for(&op.planned()).as_ref() != Some(&op) {
            self.followups.insert(cidr);
        }
        // Likewise a delete: the node may want the route again (the CIDR came back to
        // it while the delete was in flight, and a pass in between kept the route it
        // still saw). Without another look it stayed missing until the resync. A
        // replacement (new addresses) queued its create behind this delete, and that
        // create is the look: another pass would find nothing to do (and list again
        // in poll mode).
        if deleted
            && !pass_due
            && self.nodes.get(op.node()).is_some_and(|k| k.has_cidr(cidr))
            && !self.ops.create_queued(op.node(), cidr)
        {
            self.followups.insert(cidr);
        }
        if self.followups.remove(&cidr) {
            self.trigger(Trigger::Followup(cidr), now);
        }
        if let OpKind::Create(c) = &op {
            let node = &c.route.target_node;
            if self.ops.pending_creates(node) == 0
                && let Some(routable) = self.nodes.get(node).map(Known::is_routable)
            {
                self.write_condition_for(node, Some(routable), pass, out);
            }
        }
    }

    /// A delete of `cidr` failed or was refused: the old route is still there, so the
    /// create queued behind it (a replacement) would fail too; it waits for the
    /// delete's retry, whose pass plans it again.
    fn hold_create_behind(&mut self, cidr: Cidr, now: Instant, out: &mut Vec<Command>) {
        if let Some(dropped) = self.ops.remove_queued_create(cidr) {
            self.passes.resolve(dropped.pass, |r| r.deferred += 1);
            self.maybe_finish(dropped.pass, now, out);
        }
    }

    fn forget_route(&mut self, route: &Route, cidr: Cidr) {
        if let Some(view) = &mut self.view {
            view.remove(route, cidr);
        }
    }

    /// Whether failed work gets retries of its own: always in watch mode, in poll mode
    /// unless upstream's is reproduced, never in upstream's watch mode.
    fn retries_failures(&self) -> bool {
        match self.config.mode {
            Mode::Watch => true,
            Mode::Poll => self.config.poll_retries,
            Mode::UpstreamWatch => false,
        }
    }

    /// A fenced operation is never retried: the lease is gone, and the new leader
    /// lists and repairs whatever it left half done. Poll mode retries too, with the
    /// same backoff, through an early pass (which lists, as every poll pass does):
    /// upstream leaves a failed create to the next poll, 10 s later, unless its
    /// provider's SDK retried it already, and cloud-provider-aws's does. Upstream's own
    /// modes, reproduced for comparison, keep no retry.
    fn schedule_retry(&mut self, cidr: Cidr, kind: CloudErrorKind, now: Instant) {
        if self.retries_failures() && kind != CloudErrorKind::Fenced {
            self.retries.route_failed(cidr, kind, now);
        }
    }
}
