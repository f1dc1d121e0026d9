//! When failed work is tried again: per-route retries with jittered exponential
//! backoff (watch and poll mode), the retry of a failed route list, and the backoff
//! of failed condition writes. It owns the random source of the jitter, so a seeded controller
//! retries at the same instants every run.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::model::Cidr;
use crate::provider::CloudErrorKind;

struct Retry {
    attempts: u32,
    not_before: Instant,
    /// Its trigger was raised; the pass it caused decides what happens next.
    fired: bool,
}

/// The retry state. See the module documentation.
pub(super) struct Retries {
    routes: BTreeMap<Cidr, Retry>,
    list_failures: u32,
    list_retry_at: Option<Instant>,
    initial: Duration,
    max: Duration,
    rng: SmallRng,
}

impl Retries {
    /// Retries from `initial` doubling up to `max`, jittered from `seed` (`None`: the
    /// OS seeds it).
    pub fn new(initial: Duration, max: Duration, seed: Option<u64>) -> Retries {
        Retries {
            routes: BTreeMap::new(),
            list_failures: 0,
            list_retry_at: None,
            initial,
            max,
            rng: match seed {
                Some(seed) => SmallRng::seed_from_u64(seed),
                None => rand::make_rng(),
            },
        }
    }

    /// A draw in [0, 1) from the jitter source (also used once for the resync period).
    pub fn draw(&mut self) -> f64 {
        self.rng.random_range(0.0..1.0)
    }

    /// `base × 2^(attempt-1)`, capped at the maximum, then jittered into [½, 1] of
    /// that, so that many failing together do not retry in lock-step.
    pub fn backoff(&mut self, attempt: u32, base: Duration) -> Duration {
        let draw = self.draw();
        crate::backoff::delay(base, attempt, self.max, (0.5, 1.0), draw)
    }

    /// The first delay of every backoff (`Config::retry_initial`).
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The operation on `cidr` failed with `kind` at `now`: when to try it again.
    /// Conflicts clear soon; invalid requests are retried slowly.
    pub fn route_failed(&mut self, cidr: Cidr, kind: CloudErrorKind, now: Instant) {
        let attempts = self.routes.get(&cidr).map_or(0, |r| r.attempts) + 1;
        let delay = match kind {
            CloudErrorKind::Retry { after: Some(after) } => after,
            CloudErrorKind::Conflict => self.backoff(attempts, self.initial / 2),
            CloudErrorKind::Invalid => self.backoff(attempts, self.initial * 30),
            _ => self.backoff(attempts, self.initial),
        };
        self.routes.insert(
            cidr,
            Retry {
                attempts,
                not_before: now + delay,
                fired: false,
            },
        );
    }

    /// The routes of `cidrs` that wait for a retry are all tried again at the earliest
    /// of their instants: they failed in one request, and are tried again in one.
    pub fn align(&mut self, cidrs: &[Cidr]) {
        let earliest = cidrs
            .iter()
            .filter_map(|c| self.routes.get(c))
            .map(|r| r.not_before)
            .min();
        let Some(earliest) = earliest else { return };
        for c in cidrs {
            if let Some(r) = self.routes.get_mut(c) {
                r.not_before = earliest;
            }
        }
    }

    /// The route's operation succeeded (or is moot): no retry.
    pub fn route_done(&mut self, cidr: Cidr) {
        self.routes.remove(&cidr);
    }

    /// Whether `cidr` is still backing off at `now`.
    pub fn backing_off(&self, cidr: Cidr, now: Instant) -> bool {
        self.routes.get(&cidr).is_some_and(|r| r.not_before > now)
    }

    /// Keeps only the retries of destinations a plan still wants.
    pub fn keep_wanted(&mut self, wanted: &HashSet<Cidr>) {
        self.routes.retain(|c, _| wanted.contains(c));
    }

    /// A pass queued the route's operation again: its retry, if not yet handed out,
    /// is not handed out. A new failure schedules the next one.
    pub fn taken(&mut self, cidr: Cidr) {
        if let Some(r) = self.routes.get_mut(&cidr) {
            r.fired = true;
        }
    }

    /// Routes waiting for a retry.
    pub fn failing(&self) -> usize {
        self.routes.len()
    }

    /// The route retries due at `now`, each handed out once.
    pub fn due_routes(&mut self, now: Instant) -> Vec<Cidr> {
        let mut due = Vec::new();
        for (cidr, r) in &mut self.routes {
            if !r.fired && r.not_before <= now {
                r.fired = true;
                due.push(*cidr);
            }
        }
        due
    }

    /// The route list failed at `now`: when to list again (watch and poll mode;
    /// upstream's watch mode retries it its own way and keeps no count).
    pub fn list_failed(&mut self, kind: CloudErrorKind, now: Instant) {
        self.list_failures += 1;
        let delay = match kind {
            CloudErrorKind::RateLimited { after }
            | CloudErrorKind::Retry { after: Some(after) } => after,
            _ => self.backoff(self.list_failures, self.initial),
        };
        self.list_retry_at = Some(now + delay);
    }

    /// A list succeeded: a retry of the failed one still to come is moot.
    pub fn list_done(&mut self) {
        self.list_failures = 0;
        self.list_retry_at = None;
    }

    /// Whether the list's retry is due at `now` (handed out once).
    pub fn list_due(&mut self, now: Instant) -> bool {
        let due = self.list_retry_at.is_some_and(|t| t <= now);
        if due {
            self.list_retry_at = None;
        }
        due
    }

    /// When the failed list is tried again, if it failed.
    pub fn list_retry_at(&self) -> Option<Instant> {
        self.list_retry_at
    }

    /// The route retries not yet handed out, by destination.
    pub fn route_retries(&self) -> impl Iterator<Item = (Cidr, Instant)> + '_ {
        self.routes
            .iter()
            .filter(|(_, r)| !r.fired)
            .map(|(cidr, r)| (*cidr, r.not_before))
    }
}
