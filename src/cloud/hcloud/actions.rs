//! Waiting for actions: `add_route` and `delete_route` answer with an action that
//! runs for a while; the change is done only when the action reports `success`.
//!
//! Threads waiting for actions at the same time share the polling: one of them polls
//! for all (`GET /actions?id=1&id=2…`, at most 25 IDs per request), and the others
//! sleep until its results arrive. The [`PollSchedule`] decides which actions are
//! polled when; it is told the time, so it is tested in virtual time. The waiting
//! threads read the time and sleep through an [`ActionClock`]: the real one in the
//! binary, a virtual one in tests, so that a whole wait (how many polls, how long) is
//! exact in a test. No background thread is involved, so nothing needs stopping when
//! the provider is dropped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::api::{ActionJson, ActionsEnvelope, ApiError, Client, Request};
use crate::provider::CloudErrorKind;

/// The API accepts up to 25 IDs per `GET /actions` (hcloud-go's batch size).
pub(super) const MAX_IDS_PER_POLL: usize = 25;

/// Polls of one action that may fail in a row, one poll interval apart, before the
/// action is given up as ambiguous. A poll refused for the rate limit is one of them:
/// waiting out the budget here would hide it from the controller.
const MAX_FAILED_POLLS: u32 = 5;

/// The time the action poller reads and sleeps in.
#[derive(Clone, Debug, Default)]
pub enum ActionClock {
    /// The monotonic clock; a sleep waits on the poller's condition variable, so that
    /// results polled by another thread wake it early.
    #[default]
    Real,
    /// Virtual time (tests): a sleep returns at once with the clock moved on by its
    /// length. For one waiting thread at a time: a thread waiting for another's poll
    /// would skip straight to its deadline.
    Virtual(Arc<VirtualTime>),
}

/// A clock that moves only when told to, or when the poller sleeps on it.
#[derive(Debug)]
pub struct VirtualTime {
    now: Mutex<Instant>,
}

impl VirtualTime {
    /// A virtual clock that reads `start` until it moves.
    pub fn new(start: Instant) -> VirtualTime {
        VirtualTime {
            now: Mutex::new(start),
        }
    }

    /// The virtual time now.
    pub fn now(&self) -> Instant {
        *crate::sync::lock(&self.now)
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: Duration) {
        *crate::sync::lock(&self.now) += by;
    }
}

impl ActionClock {
    fn now(&self) -> Instant {
        match self {
            ActionClock::Real => Instant::now(),
            ActionClock::Virtual(time) => time.now(),
        }
    }
}

/// When each waiting action is next polled.
#[derive(Debug)]
pub(super) struct PollSchedule {
    first_poll: Duration,
    interval: Duration,
    /// Actions waiting for their next poll; those being polled right now are absent.
    due: BTreeMap<u64, Instant>,
}

impl PollSchedule {
    pub(super) fn new(first_poll: Duration, interval: Duration) -> PollSchedule {
        PollSchedule {
            first_poll,
            interval,
            due: BTreeMap::new(),
        }
    }

    /// A new action, started at `now`: first polled after the first-poll delay.
    pub(super) fn add(&mut self, id: u64, now: Instant) {
        self.due.insert(id, now + self.first_poll);
    }

    /// A polled action is still running: poll it again after the interval.
    pub(super) fn still_running(&mut self, id: u64, now: Instant) {
        self.due.insert(id, now + self.interval);
    }

    pub(super) fn remove(&mut self, id: u64) {
        self.due.remove(&id);
    }

    /// When the next poll is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// The actions to poll in one request at `now`, earliest first: those due, plus
    /// those due within half an interval (they would otherwise cost a request of their
    /// own a moment later), at most [`MAX_IDS_PER_POLL`]. Nothing if none is due.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<u64> {
        if self.next_due().is_none_or(|d| d > now) {
            return Vec::new();
        }
        let horizon = now + self.interval.min(self.first_poll) / 2;
        let mut ready: Vec<(Instant, u64)> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= horizon)
            .map(|(id, at)| (*at, *id))
            .collect();
        ready.sort();
        ready.truncate(MAX_IDS_PER_POLL);
        for (_, id) in &ready {
            self.due.remove(id);
        }
        ready.into_iter().map(|(_, id)| id).collect()
    }
}

/// How an action ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ActionEnd {
    Success,
    /// `status: error`, with the action's error code and message.
    Failed {
        code: String,
        message: String,
    },
}

impl ActionEnd {
    fn from_json(action: &ActionJson) -> Option<ActionEnd> {
        match action.status.as_str() {
            "running" => None,
            "success" => Some(ActionEnd::Success),
            _ => {
                let (code, message) = action
                    .error
                    .as_ref()
                    .map(|e| (e.code.clone(), e.message.clone()))
                    .unwrap_or_else(|| {
                        (
                            "unknown".to_string(),
                            format!("action ended with status {:?}", action.status),
                        )
                    });
                Some(ActionEnd::Failed { code, message })
            }
        }
    }
}

/// Shares the polling of actions between the threads waiting for them.
#[derive(Debug)]
pub(super) struct ActionPoller {
    state: Mutex<PollerState>,
    results: Condvar,
    timeout: Duration,
    clock: ActionClock,
}

#[derive(Debug)]
struct PollerState {
    schedule: PollSchedule,
    /// Actions with a thread waiting for them.
    waiting: HashSet<u64>,
    /// Outcomes not yet picked up by their waiter.
    done: HashMap<u64, Result<ActionEnd, ApiError>>,
    failed_polls: HashMap<u64, u32>,
    /// A thread is polling right now.
    polling: bool,
}

impl ActionPoller {
    pub(super) fn new(
        first_poll: Duration,
        interval: Duration,
        timeout: Duration,
        clock: ActionClock,
    ) -> ActionPoller {
        ActionPoller {
            state: Mutex::new(PollerState {
                schedule: PollSchedule::new(first_poll, interval),
                waiting: HashSet::new(),
                done: HashMap::new(),
                failed_polls: HashMap::new(),
                polling: false,
            }),
            results: Condvar::new(),
            timeout,
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, PollerState> {
        crate::sync::lock(&self.state)
    }

    /// Blocks until `action` ends. `what` names the change for messages. An action
    /// that cannot be followed to its end (polls keep failing, or it runs past the
    /// timeout) is reported as ambiguous: it may still succeed.
    pub(super) fn wait(
        &self,
        client: &Client,
        action: &ActionJson,
        what: &str,
    ) -> Result<ActionEnd, ApiError> {
        if let Some(end) = ActionEnd::from_json(action) {
            return Ok(end);
        }
        let id = action.id;
        let started = self.clock.now();
        let deadline = started + self.timeout;
        let mut state = self.lock();
        state.schedule.add(id, started);
        state.waiting.insert(id);
        loop {
            if let Some(outcome) = state.done.remove(&id) {
                state.waiting.remove(&id);
                state.failed_polls.remove(&id);
                return outcome;
            }
            let now = self.clock.now();
            if now >= deadline {
                state.schedule.remove(id);
                state.waiting.remove(&id);
                state.failed_polls.remove(&id);
                return Err(ApiError::new(
                    CloudErrorKind::Ambiguous,
                    format!(
                        "hcloud: {what}: action {id} still running after {}; it may yet succeed",
                        crate::duration::format(self.timeout)
                    ),
                ));
            }
            if state.polling {
                state = self.sleep(state, deadline - now);
                continue;
            }
            let batch = state.schedule.take_due(now);
            if batch.is_empty() {
                let until = state.schedule.next_due().unwrap_or(deadline).min(deadline);
                state = self.sleep(state, until.saturating_duration_since(now));
                continue;
            }
            state.polling = true;
            drop(state);
            let reply = poll(client, &batch);
            state = self.lock();
            state.polling = false;
            record(&mut state, &batch, reply, self.clock.now());
            self.results.notify_all();
        }
    }

    fn sleep<'a>(
        &self,
        state: MutexGuard<'a, PollerState>,
        at_most: Duration,
    ) -> MutexGuard<'a, PollerState> {
        match &self.clock {
            ActionClock::Real => {
                self.results
                    .wait_timeout(state, at_most)
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            ActionClock::Virtual(time) => {
                time.advance(at_most);
                state
            }
        }
    }
}

fn poll(client: &Client, ids: &[u64]) -> Result<Vec<ActionJson>, ApiError> {
    let mut request = Request::get("/actions".to_string(), "/actions");
    for id in ids {
        request = request.query("id", id);
    }
    client
        .get::<ActionsEnvelope>(&request)
        .map(|envelope| envelope.actions)
}

/// Files the outcome of one poll: ended actions for their waiters, running ones back
/// into the schedule, and failed polls counted towards giving up.
fn record(
    state: &mut PollerState,
    batch: &[u64],
    reply: Result<Vec<ActionJson>, ApiError>,
    now: Instant,
) {
    let actions = match reply {
        Ok(actions) => actions,
        Err(e) if e.kind == CloudErrorKind::Fenced => {
            // The lease is gone: nobody waits for more polls, which would not be sent.
            for &id in batch {
                if state.waiting.contains(&id) {
                    state.done.insert(id, Err(e.clone()));
                }
            }
            return;
        }
        Err(e) => {
            for &id in batch {
                poll_failed(state, id, &e, now);
            }
            return;
        }
    };
    for &id in batch {
        if !state.waiting.contains(&id) {
            continue;
        }
        match actions.iter().find(|a| a.id == id) {
            Some(action) => match ActionEnd::from_json(action) {
                Some(end) => {
                    state.done.insert(id, Ok(end));
                }
                None => {
                    state.failed_polls.remove(&id);
                    state.schedule.still_running(id, now);
                }
            },
            None => {
                let e = ApiError::new(
                    CloudErrorKind::Ambiguous,
                    format!("hcloud: GET /actions?id={id}: the action is missing from the reply"),
                );
                poll_failed(state, id, &e, now);
            }
        }
    }
}

fn poll_failed(state: &mut PollerState, id: u64, e: &ApiError, now: Instant) {
    if !state.waiting.contains(&id) {
        return;
    }
    let failures = state.failed_polls.entry(id).or_default();
    *failures += 1;
    if *failures >= MAX_FAILED_POLLS {
        state.done.insert(
            id,
            Err(ApiError::new(
                CloudErrorKind::Ambiguous,
                format!(
                    "hcloud: lost track of action {id} after {MAX_FAILED_POLLS} failed polls \
                     (last: {}); the change may or may not have been made",
                    e.message
                ),
            )),
        );
    } else {
        state.schedule.still_running(id, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn action(id: u64, status: &str) -> ActionJson {
        ActionJson {
            id,
            command: "add_route".into(),
            status: status.into(),
            error: None,
        }
    }

    fn state(schedule: PollSchedule) -> PollerState {
        PollerState {
            schedule,
            waiting: HashSet::new(),
            done: HashMap::new(),
            failed_polls: HashMap::new(),
            polling: false,
        }
    }

    #[test]
    fn a_new_action_is_first_polled_after_the_first_poll_delay() {
        let t0 = Instant::now();
        let mut s = PollSchedule::new(ms(500), ms(1000));
        s.add(1, t0);
        assert_eq!(s.next_due(), Some(t0 + ms(500)));
        assert!(s.take_due(t0 + ms(499)).is_empty());
        assert_eq!(s.take_due(t0 + ms(500)), vec![1]);
        // Being polled: not due again until it is put back.
        assert_eq!(s.next_due(), None);
        s.still_running(1, t0 + ms(520));
        assert_eq!(s.next_due(), Some(t0 + ms(1520)));
    }

    #[test]
    fn actions_due_close_together_share_one_poll() {
        let t0 = Instant::now();
        let mut s = PollSchedule::new(ms(500), ms(1000));
        s.add(1, t0);
        s.add(2, t0 + ms(100));
        s.add(3, t0 + ms(400));
        // At 500 ms: 1 is due, 2 is due in 100 ms (within half of 500 ms), 3 later.
        assert_eq!(s.take_due(t0 + ms(500)), vec![1, 2]);
        assert_eq!(s.next_due(), Some(t0 + ms(900)));
    }

    #[test]
    fn one_poll_carries_at_most_25_ids() {
        let t0 = Instant::now();
        let mut s = PollSchedule::new(ms(500), ms(1000));
        for id in 0..30 {
            s.add(id, t0);
        }
        let first = s.take_due(t0 + ms(500));
        assert_eq!(first.len(), MAX_IDS_PER_POLL);
        assert_eq!(s.take_due(t0 + ms(500)).len(), 5);
    }

    #[test]
    fn poll_results_wake_ended_actions_and_reschedule_running_ones() {
        let t0 = Instant::now();
        let mut st = state(PollSchedule::new(ms(500), ms(1000)));
        for id in [1, 2, 3] {
            st.waiting.insert(id);
        }
        let mut failed = action(3, "error");
        failed.error = Some(super::super::api::ActionErrorJson {
            code: "action_failed".into(),
            message: "gateway unreachable".into(),
        });
        record(
            &mut st,
            &[1, 2, 3],
            Ok(vec![action(1, "success"), action(2, "running"), failed]),
            t0,
        );
        assert_eq!(st.done.get(&1), Some(&Ok(ActionEnd::Success)));
        assert_eq!(
            st.done.get(&3),
            Some(&Ok(ActionEnd::Failed {
                code: "action_failed".into(),
                message: "gateway unreachable".into()
            }))
        );
        assert!(!st.done.contains_key(&2));
        assert_eq!(st.schedule.next_due(), Some(t0 + ms(1000)));
    }

    #[test]
    fn repeated_poll_failures_give_up_as_ambiguous() {
        let t0 = Instant::now();
        let mut st = state(PollSchedule::new(ms(500), ms(1000)));
        st.waiting.insert(7);
        let err = ApiError::new(CloudErrorKind::Retry { after: None }, "connection refused");
        for i in 0..MAX_FAILED_POLLS {
            assert!(!st.done.contains_key(&7), "gave up after {i} failures");
            record(&mut st, &[7], Err(err.clone()), t0);
        }
        let outcome = st.done.get(&7).unwrap().clone().unwrap_err();
        assert_eq!(outcome.kind, CloudErrorKind::Ambiguous);
        assert!(
            outcome.message.contains("connection refused"),
            "{}",
            outcome.message
        );
    }

    #[test]
    fn a_successful_poll_resets_the_failure_count() {
        let t0 = Instant::now();
        let mut st = state(PollSchedule::new(ms(500), ms(1000)));
        st.waiting.insert(7);
        let err = ApiError::new(CloudErrorKind::Retry { after: None }, "reset");
        for _ in 0..MAX_FAILED_POLLS - 1 {
            record(&mut st, &[7], Err(err.clone()), t0);
        }
        record(&mut st, &[7], Ok(vec![action(7, "running")]), t0);
        record(&mut st, &[7], Err(err), t0);
        assert!(!st.done.contains_key(&7));
    }
}
