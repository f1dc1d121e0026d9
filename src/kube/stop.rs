//! A stop signal for the client threads: it wakes their sleeps at once and shuts down
//! the HTTP agents registered with it, which interrupts a read blocked on a quiet
//! watch stream (ureq's `Agent::shutdown`).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sync::lock;

/// Cloneable; every clone stops the same threads.
#[derive(Clone, Default)]
pub struct StopHandle(Arc<Inner>);

#[derive(Default)]
struct Inner {
    stopped: Mutex<bool>,
    wake: Condvar,
    agents: Mutex<Vec<ureq::Agent>>,
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StopHandle(stopped: {})", self.is_stopped())
    }
}

impl StopHandle {
    pub fn new() -> StopHandle {
        StopHandle::default()
    }

    /// Asks the threads to stop: wakes sleepers and interrupts blocked requests.
    pub fn stop(&self) {
        *lock(&self.0.stopped) = true;
        self.0.wake.notify_all();
        for agent in lock(&self.0.agents).drain(..) {
            agent.shutdown();
        }
    }

    pub fn is_stopped(&self) -> bool {
        *lock(&self.0.stopped)
    }

    /// Sleeps for `d` unless stopped first; returns whether it was stopped.
    pub fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut stopped = lock(&self.0.stopped);
        while !*stopped {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            stopped = match self.0.wake.wait_timeout(stopped, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        true
    }

    /// Shuts `agent` down when the handle is stopped (at once if it already is).
    pub(crate) fn register(&self, agent: ureq::Agent) {
        if self.is_stopped() {
            agent.shutdown();
            return;
        }
        let mut agents = lock(&self.0.agents);
        // An agent replaced by a newer one (new client certificate) may stay; the
        // list only grows with certificate rotations, which are rare.
        agents.push(agent);
    }
}
