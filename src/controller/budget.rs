//! The cloud's budget, spent by the controller: the provider declares its limits
//! ([`Budget`]), and an operation is dispatched only when its requests can go out at
//! once. Nothing waits in a worker, so everything queued stays re-plannable: a create
//! for a node deleted while it waited for budget is dropped, never sent.
//!
//! A refusal for the rate limit blocks all sending until the provider's Retry-After.

use std::time::{Duration, Instant};

use crate::provider::Budget;
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

/// What sending one more operation costs.
#[derive(Clone, Copy)]
pub(super) enum Cost {
    List,
    Mutation,
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
            Cost::List => 1,
            Cost::Mutation => self.budget.requests_per_mutation,
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
