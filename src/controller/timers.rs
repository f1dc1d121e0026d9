//! The controller's timers in one table: every instant at which it wants to be woken,
//! each entry named by what it wakes. [`Controller::next_deadline`] is the table's
//! earliest entry.
//!
//! The table is read from the parts that own each timer (the scheduler's debounce
//! and periodic timer, the retries, the condition writes, the budget, the drain), so
//! no instant is stored twice and none is forgotten when its owner moves it.

use std::time::Instant;

use super::Controller;
use super::budget::Cost;
use crate::model::Cidr;

/// What a timer wakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Wake {
    /// The next pass may start: the debounce after the last trigger (or its hard
    /// maximum wait), or upstream's rate limiter.
    Pass,
    /// A pass is due but a refusal for the rate limit holds everything back until
    /// the provider's Retry-After.
    PauseEnd,
    /// Poll mode's period or watch mode's full resync.
    Periodic,
    /// A new leader lists again: the previous leader's last request has timed out.
    Handover,
    /// The route list failed; list again.
    ListRetry,
    /// A failed operation on this destination is tried again.
    RouteRetry(Cidr),
    /// A failed condition write for this node is tried again.
    ConditionRetry(String),
    /// The budget will have refilled enough for the operation waiting next.
    BudgetRefill,
    /// A shutdown's drain gives up on what is still in flight.
    DrainDeadline,
}

/// The table: instants and what each wakes, in no particular order.
#[derive(Debug, Default)]
pub(super) struct Timers {
    entries: Vec<(Instant, Wake)>,
}

impl Timers {
    fn add(&mut self, at: Option<Instant>, wake: Wake) {
        if let Some(at) = at {
            self.entries.push((at, wake));
        }
    }

    /// The earliest entry.
    pub fn earliest(&self) -> Option<(Instant, &Wake)> {
        self.entries
            .iter()
            .min_by_key(|(at, _)| *at)
            .map(|(at, wake)| (*at, wake))
    }
}

impl Controller {
    /// When the controller next needs [`Input::Tick`](super::Input::Tick), if ever:
    /// the earliest of its timers. The answer changes only when
    /// [`Controller::handle`] is called.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers().earliest().map(|(at, _)| at)
    }

    /// Every timer of the controller now. After an exit nothing wakes it; during a
    /// drain only its deadline does; without the right to write (no lease, an
    /// incomplete node view) nothing does until an input changes that.
    pub(super) fn timers(&self) -> Timers {
        let mut t = Timers::default();
        if self.exited {
            return t;
        }
        if self.drain_until.is_some() {
            t.add(self.drain_until, Wake::DrainDeadline);
            return t;
        }
        if !self.can_write() {
            return t;
        }
        if self.may_start_pass()
            && let Some(due) = self.scheduler.due(&self.config)
        {
            match self.now.and_then(|now| self.pass_paused(now)) {
                Some(pause) if pause > due => t.add(Some(pause), Wake::PauseEnd),
                _ => t.add(Some(due), Wake::Pass),
            }
        }
        t.add(self.next_timer, Wake::Periodic);
        t.add(self.handover_at, Wake::Handover);
        t.add(self.retries.list_retry_at(), Wake::ListRetry);
        for (cidr, at) in self.retries.route_retries() {
            t.add(Some(at), Wake::RouteRetry(cidr));
        }
        for (node, at) in self.conditions.retries() {
            t.add(Some(at), Wake::ConditionRetry(node.to_string()));
        }
        t.add(self.budget_refill(), Wake::BudgetRefill);
        t
    }

    /// Names, in the debug log, the timer a tick at `now` was for.
    pub(super) fn log_wake(&self, now: Instant) {
        if !log::log_enabled!(log::Level::Debug) {
            return;
        }
        if let Some((at, wake)) = self.timers().earliest()
            && at <= now
        {
            log::debug!("woken for {wake:?}");
        }
    }

    /// When the budget lets the next operation out, if something waits only for it
    /// (a past instant is not a deadline: whatever could go out has gone).
    fn budget_refill(&self) -> Option<Instant> {
        let now = self.now?;
        let cost = match &self.planning {
            Some(p) if p.list.is_none() && self.ops.in_flight() == 0 => Cost::List,
            Some(_) => return None,
            None if self.config.batch_size.is_some() => {
                if self.batch.is_some() {
                    return None;
                }
                self.ops.peek_next_of(self.dispatch_order())?;
                Cost::Batch
            }
            None if self.ops.in_flight() < self.in_flight_limit()
                && self.ops.mutations_in_flight() < self.spending.mutations_at_once() =>
            {
                // The first of the kinds queued that the budget lets out: a create
                // waiting for CreateRoute's bucket does not hide a delete that could go.
                return self
                    .queued_kinds()
                    .into_iter()
                    .map(|cost| self.spending.ready_at(cost, now))
                    .min()
                    .filter(|at| *at > now);
            }
            None => return None,
        };
        Some(self.spending.ready_at(cost, now)).filter(|at| *at > now)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::controller::{CloudOp, CloudReply, Command, Config, Input, NodeEvent, RouteList};
    use crate::metrics::Metrics;
    use crate::model::{Node, NodeAddress};
    use crate::provider::{Budget, CloudError, CloudErrorKind};

    fn node(i: u8) -> Node {
        Node {
            name: format!("n{i}"),
            uid: format!("uid-{i}"),
            resource_version: "1".into(),
            provider_id: None,
            pod_cidrs: vec![format!("10.0.{i}.0/24")],
            addresses: vec![NodeAddress::internal_ip(&format!("192.168.0.{i}"))],
            network_unavailable: None,
        }
    }

    fn cloud_ops(commands: Vec<Command>) -> Vec<(u64, CloudOp)> {
        commands
            .into_iter()
            .filter_map(|c| match c {
                Command::Cloud { id, op, .. } => Some((id, op)),
                _ => None,
            })
            .collect()
    }

    /// Guards that the table names what each deadline wakes: a create waiting for
    /// budget is a budget refill; after it fails, its destination's retry. Swap two
    /// entries' names in `timers` and this fails.
    #[test]
    fn the_earliest_timer_names_what_it_wakes() {
        let mut config = Config::new(vec![crate::model::Cidr::parse("10.0.0.0/16").unwrap()]);
        config.seed = Some(7);
        config.budget = Some(Budget::new(1.0, 1));
        let mut c = Controller::new(config, Arc::new(Metrics::new()));
        let t0 = Instant::now();
        let _ = c.handle(Input::Node(NodeEvent::Init), t0);
        let _ = c.handle(Input::Node(NodeEvent::InitApply(node(1))), t0);
        let ops = cloud_ops(c.handle(Input::Node(NodeEvent::InitDone), t0));
        let [(list, CloudOp::List { .. })] = ops.as_slice() else {
            panic!("one list first: {ops:?}");
        };
        let reply = CloudReply::Listed(Ok(RouteList::new()));
        let ops = cloud_ops(c.handle(Input::Cloud { id: *list, reply }, t0));
        assert!(ops.is_empty(), "the list spent the only token: {ops:?}");
        let (at, wake) = c
            .timers()
            .earliest()
            .map(|(at, w)| (at, w.clone()))
            .unwrap();
        assert_eq!(
            (at - t0, wake),
            (Duration::from_secs(1), Wake::BudgetRefill)
        );

        let ops = cloud_ops(c.handle(Input::Tick, at));
        let [(create, CloudOp::Create { .. })] = ops.as_slice() else {
            panic!("the create once the budget refilled: {ops:?}");
        };
        let failed = CloudError::new(CloudErrorKind::Retry { after: None }, "refused");
        let reply = CloudReply::Done(Err(failed));
        let _ = c.handle(Input::Cloud { id: *create, reply }, at);
        let cidr = crate::model::Cidr::parse("10.0.1.0/24").unwrap();
        let wake = c.timers().earliest().map(|(_, w)| w.clone());
        assert_eq!(wake, Some(Wake::RouteRetry(cidr)));
    }
}
