//! The cloud's budget, spent by the controller: the provider declares its limits and
//! what each operation costs ([`Budget`]), and an operation is dispatched only when
//! its requests can go out at once. Nothing waits in a worker, so everything queued
//! stays re-plannable: a create for a node deleted while it waited for budget is
//! dropped, never sent.
//!
//! An operation is charged its declared cost when it is sent; its reply says what it
//! really cost and what the cloud reported of its budget ([`Usage`]), and the bucket
//! is corrected from that. A refusal for the rate limit blocks all sending until the
//! provider's Retry-After.

use std::time::{Duration, Instant};

use super::ops::{OpKind, Planned};
use super::{Controller, OpId};
use crate::provider::{Budget, Usage};
use crate::ratelimit::TokenBucket;

/// The budget's state. Without a declared budget only refusals pace.
pub(super) struct Spending {
    budget: Budget,
    /// Created at the first use, full, from that instant.
    bucket: Option<TokenBucket>,
    /// Set by a refusal when no bucket is kept.
    blocked_until: Option<Instant>,
    limited: bool,
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
}

impl Controller {
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
    }
}

impl Spending {
    pub fn new(budget: Option<Budget>) -> Spending {
        Spending {
            limited: budget.is_some(),
            budget: budget.unwrap_or(Budget::new(f64::MAX, u32::MAX)),
            bucket: None,
            blocked_until: None,
        }
    }

    /// Route changes that may be in flight at once.
    pub fn mutations_at_once(&self) -> usize {
        self.budget.mutations_at_once
    }

    fn tokens(&self, cost: Cost) -> u32 {
        match cost {
            Cost::List => self.budget.requests_per_list,
            Cost::Create => self.budget.requests_per_create,
            Cost::Delete => self.budget.requests_per_delete,
            Cost::Batch => self.budget.requests_per_batch,
        }
    }

    fn bucket(&mut self, now: Instant) -> Option<&mut TokenBucket> {
        if !self.limited {
            return None;
        }
        let budget = self.budget;
        Some(
            self.bucket.get_or_insert_with(|| {
                TokenBucket::new(budget.requests_per_second, budget.burst, now)
            }),
        )
    }

    /// When an operation of `cost` could go out (at or before `now`: at once).
    pub fn ready_at(&self, cost: Cost, now: Instant) -> Instant {
        let at = match &self.bucket {
            Some(b) => b.ready_at(self.tokens(cost)),
            None => now,
        };
        self.blocked_until.map_or(at, |b| at.max(b))
    }

    /// Whether an operation of `cost` may go out at `now`.
    pub fn can_send(&self, cost: Cost, now: Instant) -> bool {
        self.ready_at(cost, now) <= now
    }

    /// An operation of `cost` goes out at `now`.
    pub fn spend(&mut self, cost: Cost, now: Instant) {
        let tokens = self.tokens(cost);
        if let Some(b) = self.bucket(now) {
            b.reserve_n(tokens, now);
        }
    }

    /// An operation of `cost` reported what it spent: charge the requests it sent
    /// beyond its declared cost (action polls, pages, lookups) or give back those it
    /// did not send, then trust the cloud's count of what is left where it is lower
    /// than ours (other clients may share the budget), and hold back after a refusal.
    pub fn settle(&mut self, cost: Cost, usage: &Usage, now: Instant) {
        let charged = self.tokens(cost);
        if let Some(b) = self.bucket(now) {
            if usage.requests > charged {
                b.reserve_n(usage.requests - charged, now);
            } else {
                b.refund(charged - usage.requests, now);
            }
            if let Some(remaining) = usage.remaining {
                b.observe_budget(usage.limit, remaining, now);
            }
        }
        if let Some(after) = usage.throttled {
            self.throttled(after, now);
        }
    }

    /// The provider refused for its rate limit and said when to come back.
    pub fn throttled(&mut self, after: Duration, now: Instant) {
        match self.bucket(now) {
            Some(b) => b.observe_throttled(after, now),
            None => {
                let until = now + after;
                self.blocked_until = Some(self.blocked_until.map_or(until, |b| b.max(until)));
            }
        }
    }

    /// Whether a refusal still holds everything back at `now` (no pass starts then).
    pub fn blocked(&self, now: Instant) -> Option<Instant> {
        let b = self
            .bucket
            .as_ref()
            .and_then(TokenBucket::blocked_until)
            .max(self.blocked_until)?;
        (b > now).then_some(b)
    }
}
