//! Client-side rate limiting: a token bucket that spaces requests so that the
//! provider never has to refuse one, corrected by what the provider reports.
//!
//! [`TokenBucket`] is sans-IO (it is told the time): the controller spends the cloud's
//! budget with it, in virtual time under test. [`RateLimiter`] wraps it for threads and
//! sleeps in real time; only the Kubernetes client uses it, for the API server's QPS.
//! No cloud request ever waits in it.
//!
//! Reservations may take the bucket into debt: ten callers arriving at once on an empty
//! bucket of one token per second get send times one second apart, instead of all
//! retrying in a herd.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A token bucket with reservations.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    /// Tokens at `updated`; negative when reservations are outstanding.
    tokens: f64,
    updated: Instant,
    /// Nothing may be sent before this instant (a provider's Retry-After).
    blocked_until: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilling at `per_second`.
    pub fn new(per_second: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            per_second: per_second.max(1e-9),
            burst,
            tokens: burst,
            updated: now,
            blocked_until: None,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        if now > self.updated {
            self.updated = now;
        }
    }

    /// Takes one token and returns when the request may be sent: `now` if a token is
    /// available, later otherwise.
    pub fn reserve(&mut self, now: Instant) -> Instant {
        self.reserve_n(1, now)
    }

    /// Takes `n` tokens (a request that costs several) and returns when it may be sent.
    pub fn reserve_n(&mut self, n: u32, now: Instant) -> Instant {
        self.refill(now);
        self.tokens -= f64::from(n);
        let mut at = if self.tokens >= 0.0 {
            now
        } else {
            now + Duration::from_secs_f64(-self.tokens / self.per_second)
        };
        if let Some(b) = self.blocked_until {
            if b > at {
                at = b;
            } else if b <= now {
                self.blocked_until = None;
            }
        }
        at
    }

    /// Gives back `n` tokens taken for requests that were never sent (up to the
    /// burst).
    pub fn refund(&mut self, n: u32, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + f64::from(n)).min(self.burst);
    }

    /// The earliest instant at which `n` tokens are there and nothing blocks sending,
    /// from the bucket's state alone (no clock needed; an instant in the past means
    /// "whenever asked").
    pub fn ready_at(&self, n: u32) -> Instant {
        let missing = f64::from(n).min(self.burst) - self.tokens;
        let mut at = if missing <= 0.0 {
            self.updated
        } else {
            self.updated + Duration::from_secs_f64(missing / self.per_second)
        };
        if let Some(b) = self.blocked_until {
            at = at.max(b);
        }
        at
    }

    /// Until when the provider said to send nothing, if it did.
    pub fn blocked_until(&self) -> Option<Instant> {
        self.blocked_until
    }

    /// When a request could be sent without waiting, if it were reserved now.
    pub fn available_at(&self, now: Instant) -> Instant {
        let mut probe = self.clone();
        probe.reserve(now)
    }

    /// The provider reported its budget (Hetzner's `RateLimit-Limit`,
    /// `RateLimit-Remaining`): trust it when it is lower than ours, because other
    /// clients may share the budget. `limit` raises or lowers the bucket size.
    pub fn observe_budget(&mut self, limit: Option<u64>, remaining: u64, now: Instant) {
        self.refill(now);
        if let Some(limit) = limit
            && limit > 0
        {
            self.burst = limit as f64;
        }
        // Outstanding reservations are requests we have not sent yet; the server's
        // count does not include them.
        let debt = self.tokens.min(0.0);
        let server = remaining as f64 + debt;
        if server < self.tokens {
            self.tokens = server;
        }
    }

    /// The provider refused a request for its rate limit and said when to come back:
    /// send nothing before then, and start from an empty bucket.
    pub fn observe_throttled(&mut self, retry_after: Duration, now: Instant) {
        self.refill(now);
        self.tokens = self.tokens.min(0.0);
        let until = now + retry_after;
        self.blocked_until = Some(self.blocked_until.map_or(until, |b| b.max(until)));
    }
}

/// A [`TokenBucket`] shared by the threads that call one provider.
#[derive(Debug)]
pub struct RateLimiter {
    bucket: Mutex<TokenBucket>,
}

impl RateLimiter {
    pub fn new(per_second: f64, burst: u32) -> RateLimiter {
        RateLimiter {
            bucket: Mutex::new(TokenBucket::new(per_second, burst, Instant::now())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TokenBucket> {
        crate::sync::lock(&self.bucket)
    }

    /// Blocks until a request may be sent; returns how long it waited.
    pub fn acquire(&self) -> Duration {
        let now = Instant::now();
        let at = self.lock().reserve(now);
        let wait = at.saturating_duration_since(now);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn burst_is_immediate_then_requests_are_spaced_at_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 3, t0);
        let times: Vec<Duration> = (0..6).map(|_| b.reserve(t0) - t0).collect();
        assert_eq!(
            times,
            vec![
                secs(0.0),
                secs(0.0),
                secs(0.0),
                secs(1.0),
                secs(2.0),
                secs(3.0)
            ]
        );
    }

    #[test]
    fn tokens_refill_over_time_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 2, t0);
        b.reserve(t0);
        b.reserve(t0);
        // Ten seconds later the bucket is full again, not 20 tokens.
        let t1 = t0 + secs(10.0);
        assert_eq!(b.reserve(t1), t1);
        assert_eq!(b.reserve(t1), t1);
        assert_eq!(b.reserve(t1), t1 + secs(0.5));
    }

    #[test]
    fn a_lower_remaining_budget_from_the_provider_wins() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 3600, t0);
        b.observe_budget(Some(3600), 2, t0);
        assert_eq!(b.reserve(t0), t0);
        assert_eq!(b.reserve(t0), t0);
        assert_eq!(b.reserve(t0), t0 + secs(1.0));
    }

    #[test]
    fn a_higher_remaining_budget_does_not_add_tokens() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 10, t0);
        for _ in 0..10 {
            b.reserve(t0);
        }
        b.observe_budget(None, 10, t0);
        assert_eq!(b.reserve(t0), t0 + secs(1.0));
    }

    #[test]
    fn throttling_blocks_until_retry_after() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(100.0, 100, t0);
        b.observe_throttled(secs(30.0), t0);
        assert_eq!(b.reserve(t0 + secs(1.0)), t0 + secs(30.0));
        // After the block, the bucket refilled meanwhile and sends at once.
        let later = t0 + secs(31.0);
        assert_eq!(b.reserve(later), later);
    }
}
