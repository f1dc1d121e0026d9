//! When passes start: the coalescing of triggers, and the periodic timers (poll,
//! resync) that raise them.
//!
//! Sans-IO like the rest of the controller: told the time, it says when the next pass
//! is due and hands over the batch of triggers a pass serves.

use std::time::{Duration, Instant};

use super::{Cause, Config, Controller, Mode, Trigger};

/// Decides when the next pass starts.
///
/// Ours: the first trigger after a quiet period starts a pass at once; later ones wait
/// until `debounce` has passed without a new trigger, but never longer than
/// `max_wait` from the first. Timers (resync, poll, retries) start at once.
///
/// Upstream's: every trigger reserves a token from a bucket of one per 10 s; its delay
/// is what the reservation needs, capped at 10 s. A key ready now is queued; one that
/// must wait is parked, keeping the earliest ready time.
pub(super) enum Scheduler {
    Ours {
        pending: Option<Pending>,
        /// The last node change seen, pending or not: the quiet period runs from it.
        last_node_trigger: Option<Instant>,
    },
    Upstream {
        queued: Option<Pending>,
        parked: Option<(Instant, Pending)>,
        next_token: Option<Instant>,
    },
}

pub(super) struct Pending {
    cause: Cause,
    times: Vec<Instant>,
    first: Instant,
    last_node_trigger: Option<Instant>,
    immediate: bool,
    force_list: bool,
}

/// The triggers a pass serves.
pub(super) struct Batch {
    pub cause: Cause,
    pub times: Vec<Instant>,
    pub force_list: bool,
}

/// Upstream's `minRouteResyncInterval`: bucket rate and max-wait cap.
const UPSTREAM_INTERVAL: Duration = Duration::from_secs(10);

impl Pending {
    fn new(now: Instant) -> Pending {
        Pending {
            cause: Cause::default(),
            times: Vec::new(),
            first: now,
            last_node_trigger: None,
            immediate: false,
            force_list: false,
        }
    }

    fn add(&mut self, trigger: Trigger, now: Instant) {
        if trigger.is_timer() {
            self.immediate = true;
        } else {
            self.last_node_trigger = Some(now);
        }
        self.force_list |= trigger.forces_list();
        self.times.push(now);
        self.cause.add(trigger);
    }

    fn merge(&mut self, other: Pending) {
        self.first = self.first.min(other.first);
        self.immediate |= other.immediate;
        self.force_list |= other.force_list;
        self.times.extend(other.times);
        for t in other.cause.samples {
            self.cause.add(t);
        }
    }

    fn into_batch(self) -> Batch {
        Batch {
            cause: self.cause,
            times: self.times,
            force_list: self.force_list,
        }
    }
}

impl Scheduler {
    pub(super) fn new(mode: Mode) -> Scheduler {
        match mode {
            Mode::UpstreamWatch => Scheduler::Upstream {
                queued: None,
                parked: None,
                next_token: None,
            },
            Mode::Watch | Mode::Poll => Scheduler::Ours {
                pending: None,
                last_node_trigger: None,
            },
        }
    }

    pub(super) fn has_pending(&self) -> bool {
        match self {
            Scheduler::Ours { pending, .. } => pending.is_some(),
            Scheduler::Upstream { queued, parked, .. } => queued.is_some() || parked.is_some(),
        }
    }

    /// Adds a trigger. `busy` says a pass is running.
    pub(super) fn trigger(&mut self, trigger: Trigger, now: Instant, busy: bool, config: &Config) {
        match self {
            Scheduler::Ours {
                pending,
                last_node_trigger,
            } => {
                let fresh = pending.is_none();
                let is_timer = trigger.is_timer();
                let quiet = last_node_trigger
                    .is_none_or(|t| now.saturating_duration_since(t) >= config.debounce);
                if !is_timer {
                    *last_node_trigger = Some(now);
                }
                let p = pending.get_or_insert_with(|| Pending::new(now));
                p.add(trigger, now);
                // Leading edge: the first node change after a quiet period, into an idle
                // controller, starts a pass now.
                if fresh && !busy && !is_timer && quiet {
                    p.immediate = true;
                }
            }
            Scheduler::Upstream {
                queued,
                parked,
                next_token,
            } => {
                let token_at = next_token.map_or(now, |t| t.max(now));
                *next_token = Some(token_at + UPSTREAM_INTERVAL);
                let delay = token_at
                    .saturating_duration_since(now)
                    .min(UPSTREAM_INTERVAL);
                if delay.is_zero() {
                    let q = queued.get_or_insert_with(|| Pending::new(now));
                    q.add(trigger, now);
                    q.immediate = true;
                } else {
                    let ready = now + delay;
                    match parked {
                        Some((at, p)) => {
                            *at = (*at).min(ready);
                            p.add(trigger, now);
                        }
                        None => {
                            let mut p = Pending::new(now);
                            p.add(trigger, now);
                            *parked = Some((ready, p));
                        }
                    }
                }
            }
        }
    }

    /// Feeds a trigger into a pending batch without affecting when it runs (changes
    /// found by a relist ride along with the relist's own trigger).
    pub(super) fn note(&mut self, trigger: Trigger, now: Instant) {
        if let Scheduler::Ours {
            pending: Some(p), ..
        } = self
        {
            p.times.push(now);
            p.cause.add(trigger);
        }
    }

    /// Moves parked entries whose time has come into the queue.
    pub(super) fn advance(&mut self, now: Instant) {
        if let Scheduler::Upstream { queued, parked, .. } = self
            && parked.as_ref().is_some_and(|(at, _)| *at <= now)
        {
            let Some((_, mut p)) = parked.take() else {
                return;
            };
            p.immediate = true;
            match queued {
                Some(q) => q.merge(p),
                None => *queued = Some(p),
            }
        }
    }

    /// When the next pass may start, if one is pending.
    pub(super) fn due(&self, config: &Config) -> Option<Instant> {
        match self {
            Scheduler::Ours { pending: None, .. } => None,
            Scheduler::Ours {
                pending: Some(p), ..
            } => {
                if p.immediate {
                    return Some(p.first);
                }
                let last = p.last_node_trigger.unwrap_or(p.first);
                Some((last + config.debounce).min(p.first + config.max_wait))
            }
            Scheduler::Upstream { queued, parked, .. } => match (queued, parked) {
                (Some(q), _) => Some(q.first),
                (None, Some((at, _))) => Some(*at),
                (None, None) => None,
            },
        }
    }

    pub(super) fn take(&mut self, now: Instant) -> Option<Batch> {
        self.advance(now);
        match self {
            Scheduler::Ours { pending, .. } => pending.take().map(Pending::into_batch),
            Scheduler::Upstream { queued, .. } => queued.take().map(Pending::into_batch),
        }
    }

    pub(super) fn clear(&mut self) {
        match self {
            Scheduler::Ours { pending, .. } => *pending = None,
            Scheduler::Upstream { queued, parked, .. } => {
                *queued = None;
                *parked = None;
            }
        }
    }
}

// The controller's periodic timers: poll mode's period, watch mode's resync.
impl Controller {
    /// Arms the periodic timer after the first complete list (or on leadership).
    pub(super) fn arm_timer(&mut self, now: Instant) {
        self.next_timer = match self.config.mode {
            Mode::Poll => Some(now),
            Mode::Watch | Mode::UpstreamWatch => Some(now + self.resync_period),
        };
    }

    /// The periodic timer fired.
    pub(super) fn fire_timer(&mut self, now: Instant) {
        match self.config.mode {
            Mode::Poll => {
                // Re-armed from the start of the pass it causes (see start_pass).
                self.next_timer = None;
                self.trigger(Trigger::Poll, now);
            }
            Mode::Watch => {
                self.next_timer = Some(now + self.resync_period);
                self.trigger(Trigger::Resync, now);
            }
            Mode::UpstreamWatch => {
                // An informer resync re-delivers every node; each enqueues.
                self.next_timer = Some(now + self.resync_period);
                for name in self.nodes.names() {
                    self.trigger(Trigger::NodeResynced(name), now);
                }
            }
        }
    }
}
