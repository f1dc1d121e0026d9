//! The fence: whether a cloud request may leave the process now.
//!
//! One [`Fence`] is shared by the leader election, the cloud workers and the
//! providers. Leader election opens it on every successful acquire or renew, until
//! the instant that write was sent plus the renew deadline, on the monotonic clock;
//! it closes it when the lease is lost or released. Every provider checks it in its
//! one request-sending function, right before a request goes out, so an operation of
//! several requests (AWS: `ModifyInstanceAttribute`, then `CreateRoute`; Hetzner: the
//! action's POST, then its polls) stops between two of them, and the workers check it
//! before an operation starts. The deadline closes the fence by itself: whatever the
//! lease thread is doing (a renewal stuck on a stalled API server), no request leaves
//! once the renew deadline has passed without a renewal.
//!
//! Once closed by a loss or a passed deadline the fence stays closed: a replica that
//! lost the lease exits, as the CCM does, and never writes again, even if a late
//! renewal succeeds. A request already on the wire is bounded by the provider's
//! request timeout, which the providers declare here ([`Fence::covers`]), so that a
//! new leader knows how long an old leader's last request may still land.
//!
//! A leaf of the core: it knows the time only when told, or from `Instant::now()` in
//! [`Fence::check`], the one call the drivers make.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::provider::{CloudError, CloudErrorKind};
use crate::sync::lock;

/// Whether cloud requests may be sent. Cheap to clone; clones share one state.
#[derive(Clone)]
pub struct Fence {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    state: State,
    /// The longest request timeout of the providers behind the fence.
    request_bound: Option<Duration>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not the leader yet: closed until leader election opens it.
    Standby,
    /// The leader, until this instant unless a renewal moves it.
    Until(Instant),
    /// No leader election: open until closed.
    Always,
    /// The lease was lost, released, or its renew deadline passed: closed for good.
    Lost,
}

impl Fence {
    /// A closed fence that leader election opens ([`Builder`](crate::Builder) opens
    /// it for good when there is no leader election).
    pub fn new() -> Fence {
        Fence::with(State::Standby)
    }

    /// An open fence, for a provider used without leader election.
    pub fn open() -> Fence {
        Fence::with(State::Always)
    }

    fn with(state: State) -> Fence {
        Fence {
            inner: Arc::new(Mutex::new(Inner {
                state,
                request_bound: None,
            })),
        }
    }

    /// Without leader election: open until [`Fence::close`].
    pub fn open_for_good(&self) {
        let mut inner = lock(&self.inner);
        if inner.state == State::Standby {
            inner.state = State::Always;
        }
    }

    /// The lease was acquired or renewed: open until `until` (the instant the write
    /// was sent plus the renew deadline). A renewal that comes after the fence's
    /// deadline has passed (`now`) does not reopen it.
    pub fn open_until(&self, until: Instant, now: Instant) {
        let mut inner = lock(&self.inner);
        inner.state = match inner.state {
            State::Standby => State::Until(until),
            State::Until(old) if now < old => State::Until(until.max(old)),
            State::Until(_) | State::Lost => State::Lost,
            State::Always => State::Always,
        };
    }

    /// The lease is lost or released: closed for good.
    pub fn close(&self) {
        lock(&self.inner).state = State::Lost;
    }

    /// Whether a request may go out now; the error says why not, as
    /// [`CloudErrorKind::Fenced`].
    pub fn check(&self) -> Result<(), CloudError> {
        self.check_at(Instant::now())
    }

    /// Whether a request may go out at `now`. A passed deadline closes the fence for
    /// good.
    pub fn check_at(&self, now: Instant) -> Result<(), CloudError> {
        let mut inner = lock(&self.inner);
        let why = match inner.state {
            State::Always => return Ok(()),
            State::Until(until) if now < until => return Ok(()),
            State::Until(_) => {
                inner.state = State::Lost;
                "the leader lease's renew deadline passed without a renewal"
            }
            State::Standby => "this replica does not hold the leader lease",
            State::Lost => "this replica lost the leader lease",
        };
        Err(CloudError::new(
            CloudErrorKind::Fenced,
            format!("cloud request not sent: {why}"),
        ))
    }

    /// When the fence closes unless it is renewed, while it is open on a deadline.
    pub fn deadline(&self) -> Option<Instant> {
        match lock(&self.inner).state {
            State::Until(until) => Some(until),
            _ => None,
        }
    }

    /// A provider behind this fence gives up on a request after `request_timeout`:
    /// a request let through may land that long after the fence closed.
    pub fn covers(&self, request_timeout: Duration) {
        let mut inner = lock(&self.inner);
        inner.request_bound = Some(
            inner
                .request_bound
                .map_or(request_timeout, |b| b.max(request_timeout)),
        );
    }

    /// The longest request timeout declared with [`Fence::covers`], if any.
    pub fn request_bound(&self) -> Option<Duration> {
        lock(&self.inner).request_bound
    }
}

impl Default for Fence {
    fn default() -> Fence {
        Fence::new()
    }
}

impl fmt::Debug for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = lock(&self.inner);
        f.debug_struct("Fence")
            .field("state", &inner.state)
            .field("request_bound", &inner.request_bound)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(r: Result<(), CloudError>) -> Option<CloudErrorKind> {
        r.err().map(|e| e.kind)
    }

    #[test]
    fn a_standby_fence_opens_on_acquire_and_closes_at_its_deadline_for_good() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let fence = Fence::new();
        assert_eq!(kind(fence.check_at(t0)), Some(CloudErrorKind::Fenced));
        fence.open_until(t0 + s(10), t0);
        assert_eq!(fence.check_at(t0 + s(9)), Ok(()));
        fence.open_until(t0 + s(12), t0 + s(2));
        assert_eq!(fence.deadline(), Some(t0 + s(12)));
        assert_eq!(fence.check_at(t0 + s(11)), Ok(()));
        assert_eq!(
            kind(fence.check_at(t0 + s(12))),
            Some(CloudErrorKind::Fenced)
        );
        // A renewal that arrives after the deadline does not reopen it.
        fence.open_until(t0 + s(30), t0 + s(13));
        assert_eq!(
            kind(fence.check_at(t0 + s(14))),
            Some(CloudErrorKind::Fenced)
        );
        assert_eq!(fence.deadline(), None);
    }

    #[test]
    fn a_late_renewal_closes_even_an_unchecked_fence_and_close_is_final() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let late = Fence::new();
        late.open_until(t0 + s(10), t0);
        late.open_until(t0 + s(21), t0 + s(11));
        assert!(late.check_at(t0 + s(12)).is_err());

        let lost = Fence::new();
        lost.open_until(t0 + s(10), t0);
        lost.close();
        assert!(lost.check_at(t0 + s(1)).is_err());
        lost.open_until(t0 + s(20), t0 + s(2));
        lost.open_for_good();
        assert!(lost.check_at(t0 + s(3)).is_err());
    }

    #[test]
    fn without_election_the_fence_is_open_and_the_bound_is_the_longest_timeout() {
        let fence = Fence::new();
        fence.open_for_good();
        assert_eq!(fence.check(), Ok(()));
        assert_eq!(Fence::open().check(), Ok(()));
        assert_eq!(fence.request_bound(), None);
        fence.covers(Duration::from_secs(5));
        fence.covers(Duration::from_secs(20));
        fence.covers(Duration::from_secs(3));
        assert_eq!(fence.request_bound(), Some(Duration::from_secs(20)));
        fence.close();
        assert!(fence.check().is_err());
    }
}
