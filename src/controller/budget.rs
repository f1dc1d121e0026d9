//! The cloud's budget, spent by the controller: the provider declares its buckets
//! and what each operation draws from them ([`Budget`]), and an operation is
//! dispatched only when every bucket it draws from can pay at once. Nothing waits in
//! a worker, so everything queued stays re-plannable: a create for a node deleted
//! while it waited for budget is dropped, never sent.
//!
//! An operation is charged its declared draws when it is sent; its reply says what it
//! really cost, by bucket, and what the cloud reported of its budget ([`Usage`]), and
//! each bucket it drew from is corrected from that. A refusal for the rate limit
//! blocks the bucket it names (without a name: every bucket the operation draws
//! from) until the provider's Retry-After, so that EC2 throttling `DeleteRoute` holds
//! back the deletes and nothing else.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::ops::{OpKind, Planned};
use super::{Controller, Mode, OpId};
use crate::provider::{Budget, BudgetOp, Usage};
use crate::ratelimit::TokenBucket;

/// Operations in flight at most unless `--concurrent-route-operations` says otherwise
/// ([`Config::max_in_flight`](super::Config::max_in_flight)'s default): upstream's
/// default, a ceiling rather than a target.
pub const IN_FLIGHT_CEILING: usize = 200;

/// The budget's state. Without a declared budget only refusals pace.
pub(super) struct Spending {
    budget: Budget,
    /// One per bucket of the budget, created at the first use, full, from that
    /// instant.
    buckets: BTreeMap<&'static str, TokenBucket>,
    /// Set by a refusal when no bucket is kept.
    blocked_until: Option<Instant>,
    limited: bool,
    /// Operations whose report named a refusal, already applied to its bucket: their
    /// `RateLimited` answer must not block the operation's other buckets as well.
    throttle_reported: BTreeSet<OpId>,
    /// Whether the reply being handled is of such an operation.
    answering_reported: bool,
    /// Route tables the provider reported at its last list, for draws per table.
    tables: usize,
}

/// What sending one more operation costs, by its kind.
#[derive(Clone, Copy)]
pub(super) enum Cost {
    List,
    Create,
    Delete,
    /// A batch of changes, whatever its size.
    Batch,
}

impl Cost {
    /// The cost of an operation in flight (`None`: the list).
    pub fn of(kind: Option<&OpKind>) -> Cost {
        match kind {
            None => Cost::List,
            Some(OpKind::Create(_)) => Cost::Create,
            Some(OpKind::Delete(_)) => Cost::Delete,
        }
    }

    /// The cost of a queued route change.
    pub fn of_planned(op: &Planned) -> Cost {
        match op {
            Planned::Create(_) => Cost::Create,
            Planned::Delete(_) => Cost::Delete,
        }
    }

    fn op(self) -> BudgetOp {
        match self {
            Cost::List => BudgetOp::List,
            Cost::Create => BudgetOp::Create,
            Cost::Delete => BudgetOp::Delete,
            Cost::Batch => BudgetOp::Batch,
        }
    }
}

impl Controller {
    /// Until when a refusal for the rate limit holds back the next pass, if it does
    /// at `now`: a pass that lists waits while the list's buckets are blocked; one
    /// that only plans (watch mode, a fresh view) waits only while every bucket is,
    /// so that a throttled `DescribeRouteTables` does not hold back the creates.
    pub(super) fn pass_paused(&self, now: Instant) -> Option<Instant> {
        let lists = match (&self.view, self.config.mode) {
            (Some(view), Mode::Watch) => view.stale,
            _ => true,
        };
        if lists {
            self.spending.blocked_for(Cost::List, now)
        } else {
            self.spending.all_blocked(now)
        }
    }

    /// What an operation still in flight spent, reported just before its answer.
    pub(super) fn on_spent(&mut self, id: OpId, usage: &Usage, now: Instant) {
        let cost = match self.ops.flight(id) {
            _ if self.is_batch(id) => Cost::Batch,
            Some(flight) => Cost::of(flight.kind.as_ref()),
            None => {
                log::warn!("budget report for unknown cloud operation {id} ignored");
                return;
            }
        };
        self.spending.settle(cost, usage, now);
        if usage.throttled.is_some() {
            // A batch's changes are answered one by one, each as if sent alone.
            let changes = self.batch_changes(id);
            self.spending.throttle_reported.extend(changes);
            self.spending.throttle_reported.insert(id);
        }
    }
}

impl Spending {
    pub fn new(budget: Option<Budget>) -> Spending {
        Spending {
            limited: budget.is_some(),
            budget: budget.unwrap_or(Budget::new(f64::MAX, u32::MAX)),
            buckets: BTreeMap::new(),
            blocked_until: None,
            throttle_reported: BTreeSet::new(),
            answering_reported: false,
            tables: 1,
        }
    }

    /// Route changes that may be in flight at once.
    pub fn mutations_at_once(&self) -> usize {
        self.budget.mutations_at_once
    }

    /// Operations that may be in flight at once by the budget's rules: as many route
    /// changes as full buckets pay for at once and as may run at the same time. More
    /// would only wait for budget on the wire, where no new plan can drop them.
    /// Without a budget, no bound (the controller's cap applies).
    pub fn in_flight_limit(&self) -> usize {
        if !self.limited {
            return usize::MAX;
        }
        self.budget.operations_at_once().max(1)
    }

    /// Operations of `cost` that full buckets pay for at once (no limit without a
    /// budget).
    pub fn at_once(&self, cost: Cost) -> usize {
        if !self.limited {
            return usize::MAX;
        }
        self.budget.at_once_with_tables(cost.op(), self.tables)
    }

    /// The provider's list reported `n` route tables: draws per table follow.
    pub fn set_tables(&mut self, n: usize) {
        self.tables = n.max(1);
    }

    fn draws(&self, cost: Cost) -> Vec<(&'static str, u32)> {
        self.budget.draws_with_tables(cost.op(), self.tables)
    }

    /// The buckets, created full at `now` on first use.
    fn buckets(&mut self, now: Instant) -> Option<&mut BTreeMap<&'static str, TokenBucket>> {
        if !self.limited {
            return None;
        }
        if self.buckets.is_empty() {
            for b in self.budget.buckets() {
                let bucket = TokenBucket::new(b.requests_per_second, b.burst, now);
                self.buckets.insert(b.name, bucket);
            }
        }
        Some(&mut self.buckets)
    }

    /// When an operation of `cost` could go out (at or before `now`: at once): when
    /// the last of the buckets it draws from can pay.
    pub fn ready_at(&self, cost: Cost, now: Instant) -> Instant {
        let at = self
            .draws(cost)
            .iter()
            .filter_map(|(name, n)| Some(self.buckets.get(name)?.ready_at(*n)))
            .max()
            .unwrap_or(now);
        self.blocked_until.map_or(at, |b| at.max(b))
    }

    /// Whether an operation of `cost` may go out at `now`.
    pub fn can_send(&self, cost: Cost, now: Instant) -> bool {
        self.ready_at(cost, now) <= now
    }

    /// An operation of `cost` goes out at `now`: each bucket it draws from pays.
    pub fn spend(&mut self, cost: Cost, now: Instant) {
        let draws = self.draws(cost);
        if let Some(buckets) = self.buckets(now) {
            for (name, n) in draws {
                if let Some(b) = buckets.get_mut(name) {
                    b.reserve_n(n, now);
                }
            }
        }
    }

    /// An operation of `cost` reported what it spent: each bucket is charged the
    /// requests sent from it beyond what the operation drew from it when it was sent
    /// (action polls, pages, lookups), or given back those it did not send (a report
    /// that names no bucket corrects only the default bucket); then the
    /// cloud's count of what is left is trusted where it is lower than ours (other
    /// clients may share the budget), and a refusal holds back its bucket.
    pub fn settle(&mut self, cost: Cost, usage: &Usage, now: Instant) {
        let charged = self.draws(cost);
        let spent = usage.spent_by_bucket(&self.budget);
        if let Some(buckets) = self.buckets(now) {
            // A report that names no bucket says nothing of the named ones: they keep
            // their charge, and only the default bucket is corrected.
            let names: BTreeSet<&'static str> = if usage.by_bucket.is_empty() {
                BTreeSet::from([Budget::DEFAULT_BUCKET])
            } else {
                charged
                    .iter()
                    .chain(&spent)
                    .map(|(name, _)| *name)
                    .collect()
            };
            for name in names {
                let sum = |of: &[(&'static str, u32)]| -> u32 {
                    of.iter().filter(|(b, _)| *b == name).map(|(_, n)| n).sum()
                };
                let (charged, spent) = (sum(&charged), sum(&spent));
                let Some(b) = buckets.get_mut(name) else {
                    continue;
                };
                if spent > charged {
                    b.reserve_n(spent - charged, now);
                } else {
                    b.refund(charged - spent, now);
                }
            }
            if let (Some(remaining), Some(b)) =
                (usage.remaining, buckets.get_mut(Budget::DEFAULT_BUCKET))
            {
                b.observe_budget(usage.limit, remaining, now);
            }
        }
        if let Some(after) = usage.throttled {
            match usage.throttled_bucket {
                Some(name) => self.throttle_buckets(&[self.budget.known(name)], after, now),
                None => self.throttled(cost, after, now),
            }
        }
    }

    /// The reply of `id` is being handled: whether its report already applied its
    /// refusal is remembered for [`Spending::throttled_answer`].
    pub fn answering(&mut self, id: OpId) {
        self.answering_reported = self.throttle_reported.remove(&id);
    }

    /// The answer being handled is a refusal for the rate limit: every bucket the
    /// operation draws from holds back, unless its report already named the bucket.
    pub fn throttled_answer(&mut self, cost: Cost, after: Duration, now: Instant) {
        if !std::mem::take(&mut self.answering_reported) {
            self.throttled(cost, after, now);
        }
    }

    /// The provider refused an operation of `cost` for its rate limit and said when
    /// to come back: every bucket it draws from holds back.
    pub fn throttled(&mut self, cost: Cost, after: Duration, now: Instant) {
        let names: Vec<&'static str> = self.draws(cost).iter().map(|(name, _)| *name).collect();
        self.throttle_buckets(&names, after, now);
    }

    fn throttle_buckets(&mut self, names: &[&'static str], after: Duration, now: Instant) {
        match self.buckets(now) {
            Some(buckets) => {
                for name in names {
                    if let Some(b) = buckets.get_mut(name) {
                        b.observe_throttled(after, now);
                    }
                }
            }
            None => {
                let until = now + after;
                self.blocked_until = Some(self.blocked_until.map_or(until, |b| b.max(until)));
            }
        }
    }

    /// Until when a refusal holds back operations of `cost`, if it still does at
    /// `now`.
    pub fn blocked_for(&self, cost: Cost, now: Instant) -> Option<Instant> {
        let b = self
            .draws(cost)
            .iter()
            .filter_map(|(name, _)| self.buckets.get(name)?.blocked_until())
            .max()
            .max(self.blocked_until)?;
        (b > now).then_some(b)
    }

    /// Until when refusals hold back every bucket at once, if they still do at `now`
    /// (then nothing at all could go out).
    pub fn all_blocked(&self, now: Instant) -> Option<Instant> {
        if let Some(b) = self.blocked_until.filter(|b| *b > now) {
            return Some(b);
        }
        if self.buckets.is_empty() {
            return None;
        }
        self.buckets
            .values()
            .map(|b| b.blocked_until().filter(|at| *at > now))
            .try_fold(None::<Instant>, |earliest, at| {
                let at = at?;
                Some(Some(earliest.map_or(at, |e| e.min(at))))
            })
            .flatten()
    }
}
