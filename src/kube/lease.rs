//! Leader election on a coordination.k8s.io/v1 Lease, as client-go's
//! `leaderelection` package does it.
//!
//! [`Elector`] is client-go's `tryAcquireOrRenew`, sans-IO: it is told the local time
//! and the results of GET/POST/PUT, and says which request to send next. Expiry is
//! measured with the local clock from when the lease record was last seen to change,
//! never by comparing the remote `renewTime` with local time, so clock skew between
//! replicas does not matter. Writes carry the resourceVersion read, so two candidates
//! never both win: the loser gets 409 and reads again next round.
//!
//! [`spawn_leader_election`] drives it on a thread and reports gains and losses of
//! leadership; a leader that cannot renew within the renew deadline reports the loss
//! at once, and the caller must stop writing. It also keeps the [`Fence`] that every
//! cloud request passes: open until the renew deadline after the last renewal was
//! sent, closed on a loss and before a release, so that the deadline holds even while
//! this thread is stuck in a request. On stop the lease is released so that a
//! successor takes over without waiting for it to expire.

use std::io;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::Sender;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use rand::RngExt;

use super::client::{Client, Method};
use super::error::{ApiErrorKind, KubeError};
use super::stop::StopHandle;
use crate::fence::Fence;

/// Settings of leader election (defaults of component-base, as the CCM uses them).
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// `--leader-elect-resource-name` (default `route-controller`; a different name
    /// from the CCM's `cloud-controller-manager`, so both can run side by side).
    pub name: String,
    /// `--leader-elect-resource-namespace` (default `kube-system`).
    pub namespace: String,
    /// This replica's `holderIdentity` (default [`default_identity`]).
    pub identity: String,
    /// How long a lease is valid after its holder last renewed it (default 15 s).
    pub lease_duration: Duration,
    /// How long a leader keeps trying to renew before giving up (default 10 s).
    pub renew_deadline: Duration,
    /// Time between attempts (default 2 s; candidates add up to 1.2 × this as
    /// jitter).
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn new(identity: impl Into<String>) -> LeaseConfig {
        LeaseConfig {
            name: "route-controller".to_string(),
            namespace: "kube-system".to_string(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// client-go's rule: lease duration > renew deadline > 1.2 × retry period.
    pub fn validate(&self) -> Result<(), String> {
        if self.identity.is_empty() {
            return Err("leader election needs a non-empty identity".into());
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "--leader-elect-lease-duration ({:?}) must be longer than \
                 --leader-elect-renew-deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER) {
            return Err(format!(
                "--leader-elect-renew-deadline ({:?}) must be longer than 1.2 × \
                 --leader-elect-retry-period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }
}

/// A candidate waking at a lease's expiry waits this much longer, so that it does not
/// read the lease a moment too early and sleep another retry period.
const EXPIRY_MARGIN: Duration = Duration::from_millis(10);

/// client-go's `JitterFactor` for candidates.
const JITTER: f64 = 1.2;

/// `<hostname>_<random UUID>`, as the cloud-controller-manager builds its identity.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "route-controller".to_string());
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{host}_{}-{}-4{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The request the elector wants sent.
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseAction {
    /// GET the lease.
    Get,
    /// POST this new lease (it did not exist).
    Create(Lease),
    /// PUT this lease (it carries the resourceVersion read).
    Update(Lease),
}

/// The fields of a lease that make up the leader election record; a change in any of
/// them restarts the expiry clock.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    duration_seconds: i32,
    acquire: Option<MicroTime>,
    renew: Option<MicroTime>,
    transitions: i32,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire: spec.acquire_time,
            renew: spec.renew_time,
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }
}

#[derive(Clone, Debug)]
struct Observed {
    lease: Lease,
    record: Record,
    /// Local time at which `record` was first seen.
    at: Instant,
}

/// client-go's `tryAcquireOrRenew`, sans-IO. See the module documentation.
#[derive(Debug)]
pub struct Elector {
    config: LeaseConfig,
    observed: Option<Observed>,
    leading: bool,
    /// When this replica sent the last write of the lease that succeeded as its
    /// holder: other replicas cannot have seen the renewal before that instant, so
    /// the renew deadline (and the [`Fence`]) counts from there.
    renewed_at: Option<Instant>,
    /// When the write in progress was sent.
    writing_since: Option<Instant>,
    /// What was last reported to the caller.
    reported: bool,
    /// A write lost a race: the cached copy is stale and the next attempt must read.
    stale: bool,
}

impl Elector {
    pub fn new(config: LeaseConfig) -> Elector {
        Elector {
            config,
            observed: None,
            leading: false,
            renewed_at: None,
            writing_since: None,
            reported: false,
            stale: false,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// Whether this replica holds the lease (as of its last successful write).
    pub fn is_leader(&self) -> bool {
        self.leading
    }

    /// Starts an attempt: the leader renews the lease it holds straight away (its
    /// cached copy carries the resourceVersion); everyone else reads it first.
    pub fn attempt(&mut self, now: Instant, wall: SystemTime) -> LeaseAction {
        self.check_deadline(now);
        match &self.observed {
            Some(o) if self.leading && !self.stale && o.record.holder == self.config.identity => {
                let update = LeaseAction::Update(self.claim(&o.lease, true, wall));
                self.writing_since = Some(now);
                update
            }
            _ => LeaseAction::Get,
        }
    }

    /// The answer to GET: `Ok(None)` means 404. Returns the write to send, if any.
    pub fn on_get(
        &mut self,
        result: Result<Option<Lease>, &KubeError>,
        now: Instant,
        wall: SystemTime,
    ) -> Option<LeaseAction> {
        let lease = match result {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                let mut lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: None,
                };
                lease = self.claim(&lease, false, wall);
                self.writing_since = Some(now);
                return Some(LeaseAction::Create(lease));
            }
            Err(e) => {
                log::warn!(
                    "reading lease {}/{} failed: {e}",
                    self.config.namespace,
                    self.config.name
                );
                self.check_deadline(now);
                return None;
            }
        };
        self.stale = false;
        let record = Record::of(&lease);
        match &mut self.observed {
            Some(o) if o.record == record => o.lease = lease.clone(),
            _ => {
                self.observed = Some(Observed {
                    lease: lease.clone(),
                    record: record.clone(),
                    at: now,
                })
            }
        }
        let observed_at = self.observed.as_ref().map_or(now, |o| o.at);
        let valid_until =
            observed_at + Duration::from_secs(u64::try_from(record.duration_seconds).unwrap_or(0));
        let held_by_other = !record.holder.is_empty() && record.holder != self.config.identity;
        if held_by_other && valid_until > now {
            if self.leading {
                log::warn!(
                    "lease {}/{} is held by {}; this replica is no longer the leader",
                    self.config.namespace,
                    self.config.name,
                    record.holder
                );
                self.leading = false;
            }
            return None;
        }
        let ours = record.holder == self.config.identity;
        self.writing_since = Some(now);
        Some(LeaseAction::Update(self.claim(&lease, ours, wall)))
    }

    /// The answer to a POST or PUT: the lease as the server stored it.
    pub fn on_write(&mut self, result: Result<Lease, &KubeError>, now: Instant) {
        match result {
            Ok(lease) => {
                let record = Record::of(&lease);
                if !self.leading {
                    log::info!(
                        "this replica ({}) acquired lease {}/{}",
                        self.config.identity,
                        self.config.namespace,
                        self.config.name
                    );
                }
                self.observed = Some(Observed {
                    lease,
                    record,
                    at: now,
                });
                self.leading = true;
                self.stale = false;
                self.renewed_at = Some(self.writing_since.take().unwrap_or(now).min(now));
            }
            Err(e) => {
                match e.kind() {
                    // Another replica wrote first; read again next round.
                    Some(ApiErrorKind::Conflict | ApiErrorKind::AlreadyExists) => {
                        log::debug!("lease write lost a race: {e}");
                        self.stale = true;
                    }
                    _ => log::warn!(
                        "writing lease {}/{} failed: {e}",
                        self.config.namespace,
                        self.config.name
                    ),
                }
                self.check_deadline(now);
            }
        }
    }

    /// Until when this replica may write, if it leads: the renew deadline after the
    /// last successful write was sent. The [`Fence`] is opened until then.
    pub fn valid_until(&self) -> Option<Instant> {
        let renewed = self.renewed_at.filter(|_| self.leading)?;
        Some(renewed + self.config.renew_deadline)
    }

    /// A change of leadership to report since the last call, if any.
    pub fn leadership_change(&mut self, now: Instant) -> Option<bool> {
        self.check_deadline(now);
        if self.leading != self.reported {
            self.reported = self.leading;
            return Some(self.leading);
        }
        None
    }

    /// When to start the next attempt: the leader every retry period; candidates add
    /// up to 1.2 × that (`jitter` in [0, 1)) so they do not all ask at once. A leader
    /// never sleeps past its renew deadline.
    pub fn next_attempt(&self, now: Instant, jitter: f64) -> Instant {
        let retry = self.config.retry_period;
        if self.leading {
            let next = now + retry;
            match self.renewed_at {
                Some(r) => next.min(r + self.config.renew_deadline),
                None => next,
            }
        } else {
            let regular = now + retry + retry.mul_f64(JITTER * jitter.clamp(0.0, 1.0));
            // Better than client-go: a candidate also wakes when the lease it saw runs
            // out, instead of up to a jittered retry period later, so a successor takes
            // over a dead leader's lease as soon as it may.
            match &self.observed {
                Some(o)
                    if !o.record.holder.is_empty() && o.record.holder != self.config.identity =>
                {
                    let expiry = o.at
                        + Duration::from_secs(
                            u64::try_from(o.record.duration_seconds).unwrap_or(0),
                        );
                    if expiry > now {
                        regular.min(expiry + EXPIRY_MARGIN)
                    } else {
                        regular
                    }
                }
                _ => regular,
            }
        }
    }

    /// The write that releases the lease on a clean stop: no holder, a duration of
    /// one second, transitions kept. `None` if this replica does not lead.
    pub fn release(&mut self, wall: SystemTime) -> Option<Lease> {
        if !self.leading {
            return None;
        }
        let o = self.observed.as_ref()?;
        let mut lease = o.lease.clone();
        let now = micro_time(wall);
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(o.record.transitions),
            ..LeaseSpec::default()
        });
        self.leading = false;
        Some(lease)
    }

    /// The maximum time one request may take: a leader must still be able to notice
    /// its renew deadline.
    pub fn request_timeout(&self) -> Duration {
        self.config
            .renew_deadline
            .saturating_sub(self.config.retry_period)
            .max(Duration::from_secs(1))
    }

    fn check_deadline(&mut self, now: Instant) {
        if self.leading
            && self
                .renewed_at
                .is_some_and(|r| now.saturating_duration_since(r) >= self.config.renew_deadline)
        {
            log::error!(
                "could not renew lease {}/{} within {:?}; leadership lost",
                self.config.namespace,
                self.config.name,
                self.config.renew_deadline
            );
            self.leading = false;
        }
    }

    /// `lease` with this replica as holder. `renewing` keeps the acquire time and
    /// the transitions; otherwise this is a new term.
    fn claim(&self, lease: &Lease, renewing: bool, wall: SystemTime) -> Lease {
        let old = Record::of(lease);
        let now = micro_time(wall);
        let mut out = lease.clone();
        let spec = out.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds =
            Some(i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX));
        spec.renew_time = Some(now.clone());
        if renewing && old.acquire.is_some() {
            spec.acquire_time = old.acquire;
            spec.lease_transitions = Some(old.transitions);
        } else {
            spec.acquire_time = Some(now);
            spec.lease_transitions = Some(if lease.spec.is_some() {
                old.transitions + 1
            } else {
                0
            });
        }
        out
    }
}

fn micro_time(wall: SystemTime) -> MicroTime {
    let micros = wall
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(0))
        .unwrap_or(0);
    let ts = k8s_openapi::jiff::Timestamp::from_microsecond(micros)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}

// ---------------------------------------------------------------------------------
// The thread.

/// Starts leader election. `leadership` receives `true` when this replica gains the
/// lease and `false` when it loses it; `fence` is opened before a gain is reported,
/// until the renew deadline after each successful write, and closed before a loss is
/// reported and before the lease is released. On `stop` the lease is released if
/// held (and nothing more is sent). The thread ends on stop or when `leadership` is
/// closed.
pub fn spawn_leader_election(
    client: Client,
    config: LeaseConfig,
    leadership: Sender<bool>,
    fence: Fence,
    stop: StopHandle,
) -> io::Result<JoinHandle<()>> {
    if let Err(e) = config.validate() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, e));
    }
    std::thread::Builder::new()
        .name("leader-election".into())
        .spawn(move || {
            let mut elector = Elector::new(config);
            loop {
                if stop.is_stopped() {
                    break;
                }
                try_acquire_or_renew(&client, &mut elector, &wall_clock);
                let now = Instant::now();
                if let Some(until) = elector.valid_until() {
                    fence.open_until(until, now);
                }
                if let Some(leading) = elector.leadership_change(now) {
                    if !leading {
                        fence.close();
                    }
                    if leadership.send(leading).is_err() {
                        break;
                    }
                }
                let now = Instant::now();
                let next = elector.next_attempt(now, rand::rng().random_range(0.0..1.0));
                if stop.sleep(next.saturating_duration_since(now)) {
                    break;
                }
            }
            // Nothing may reach the cloud once a successor can take over.
            fence.close();
            release(&client, &mut elector);
        })
}

fn lease_path(config: &LeaseConfig, name: Option<&str>) -> String {
    let base = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases",
        config.namespace
    );
    match name {
        Some(n) => format!("{base}/{n}"),
        None => base,
    }
}

/// The clock of the thread: the local monotonic time and the wall-clock time.
fn wall_clock() -> (Instant, SystemTime) {
    (Instant::now(), SystemTime::now())
}

/// One `tryAcquireOrRenew` against the API server: the requests `elector` asks for,
/// with its answers fed back at the instants `clock` tells (the thread passes the real
/// clock; tests pass a virtual one, so that the timing rules run in virtual time over
/// real HTTP).
pub fn try_acquire_or_renew(
    client: &Client,
    elector: &mut Elector,
    clock: &dyn Fn() -> (Instant, SystemTime),
) {
    let timeout = elector.request_timeout();
    let config = elector.config().clone();
    let named = lease_path(&config, Some(&config.name));
    let (now, wall) = clock();
    let mut action = elector.attempt(now, wall);
    loop {
        let write = match action {
            LeaseAction::Get => {
                let got = client.get_json_timeout::<Lease>(&named, timeout);
                let got = match got {
                    Ok(l) => Ok(Some(l)),
                    Err(e) if e.is(ApiErrorKind::NotFound) => Ok(None),
                    Err(e) => Err(e),
                };
                let (now, wall) = clock();
                let next = match &got {
                    Ok(l) => elector.on_get(Ok(l.clone()), now, wall),
                    Err(e) => elector.on_get(Err(e), now, wall),
                };
                match next {
                    Some(a) => {
                        action = a;
                        continue;
                    }
                    None => return,
                }
            }
            LeaseAction::Create(lease) => client.write_json::<Lease>(
                Method::Post,
                &lease_path(&config, None),
                "application/json",
                &lease,
                Some(timeout),
            ),
            LeaseAction::Update(lease) => client.write_json::<Lease>(
                Method::Put,
                &named,
                "application/json",
                &lease,
                Some(timeout),
            ),
        };
        let (now, _) = clock();
        match &write {
            Ok(l) => elector.on_write(Ok(l.clone()), now),
            Err(e) => elector.on_write(Err(e), now),
        }
        return;
    }
}

fn release(client: &Client, elector: &mut Elector) {
    let Some(lease) = elector.release(SystemTime::now()) else {
        return;
    };
    let config = elector.config();
    let path = lease_path(config, Some(&config.name));
    match client.write_json::<Lease>(
        Method::Put,
        &path,
        "application/json",
        &lease,
        Some(elector.request_timeout()),
    ) {
        Ok(_) => log::info!("released lease {}/{}", config.namespace, config.name),
        Err(e) => log::warn!(
            "releasing lease {}/{} failed: {e}; a successor takes over when it expires",
            config.namespace,
            config.name
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict() -> KubeError {
        KubeError::Api(crate::kube::ApiError::from_response(
            "PUT /lease".into(),
            409,
            None,
            br#"{"kind":"Status","reason":"Conflict","code":409}"#,
        ))
    }

    fn wall(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    /// What the server would store: the lease with a new resourceVersion.
    fn stored(mut lease: Lease, rv: u32) -> Lease {
        lease.metadata.resource_version = Some(rv.to_string());
        lease
    }

    fn held_by(holder: &str, rv: u32, renew: u64) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("route-controller".into()),
                namespace: Some("kube-system".into()),
                resource_version: Some(rv.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(micro_time(wall(0))),
                renew_time: Some(micro_time(wall(renew))),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    fn spec(action: &LeaseAction) -> LeaseSpec {
        match action {
            LeaseAction::Create(l) | LeaseAction::Update(l) => l.spec.clone().unwrap(),
            LeaseAction::Get => panic!("expected a write"),
        }
    }

    #[test]
    fn the_first_candidate_creates_the_lease_and_leads() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        assert_eq!(e.attempt(t0, wall(0)), LeaseAction::Get);
        let create = e.on_get(Ok(None), t0, wall(0)).unwrap();
        let LeaseAction::Create(lease) = &create else {
            panic!("expected a create, got {create:?}");
        };
        assert_eq!(lease.metadata.name.as_deref(), Some("route-controller"));
        let s = spec(&create);
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.lease_duration_seconds, Some(15));
        assert_eq!(s.lease_transitions, Some(0));
        e.on_write(Ok(stored(lease.clone(), 1)), t0);
        assert_eq!(e.leadership_change(t0), Some(true));
        assert_eq!(e.leadership_change(t0), None);
    }

    #[test]
    fn a_follower_waits_a_lease_duration_from_the_last_change_it_saw_on_its_own_clock() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        // The remote renewTime is far in the past; only the local clock counts.
        assert_eq!(
            e.on_get(Ok(Some(held_by("other", 5, 0))), t0, wall(900)),
            None
        );
        let t = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(
            e.on_get(Ok(Some(held_by("other", 5, 0))), t(14), wall(914)),
            None
        );
        // The holder renewed (seen at t0+14): the clock restarts there.
        assert_eq!(
            e.on_get(Ok(Some(held_by("other", 6, 10))), t(14), wall(914)),
            None
        );
        assert_eq!(
            e.on_get(Ok(Some(held_by("other", 6, 10))), t(28), wall(928)),
            None
        );
        let take = e
            .on_get(Ok(Some(held_by("other", 6, 10))), t(29), wall(929))
            .expect("an expired lease is taken over");
        let LeaseAction::Update(lease) = &take else {
            panic!("expected an update, got {take:?}");
        };
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("6"));
        let s = spec(&take);
        assert_eq!(s.holder_identity.as_deref(), Some("me"));
        assert_eq!(s.lease_transitions, Some(4));
        assert_eq!(s.acquire_time, Some(micro_time(wall(929))));
        assert_eq!(
            e.leadership_change(t(29)),
            None,
            "not leader before the write succeeds"
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        let mut released = held_by("", 9, 0);
        released.spec.as_mut().unwrap().lease_duration_seconds = Some(1);
        assert!(matches!(
            e.on_get(Ok(Some(released)), t0, wall(0)),
            Some(LeaseAction::Update(_))
        ));
    }

    #[test]
    fn the_leader_renews_its_cached_copy_and_rereads_after_a_conflict() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        let create = e.on_get(Ok(None), t0, wall(0)).unwrap();
        let LeaseAction::Create(lease) = create else {
            panic!()
        };
        e.on_write(Ok(stored(lease, 1)), t0);
        let t2 = t0 + Duration::from_secs(2);
        let renew = e.attempt(t2, wall(2));
        let LeaseAction::Update(lease) = &renew else {
            panic!("the leader renews without reading: {renew:?}");
        };
        assert_eq!(lease.metadata.resource_version.as_deref(), Some("1"));
        let s = spec(&renew);
        assert_eq!(
            s.acquire_time,
            Some(micro_time(wall(0))),
            "acquire time kept"
        );
        assert_eq!(s.renew_time, Some(micro_time(wall(2))));
        assert_eq!(s.lease_transitions, Some(0));
        e.on_write(Err(&conflict()), t2);
        assert_eq!(
            e.attempt(t0 + Duration::from_secs(4), wall(4)),
            LeaseAction::Get
        );
    }

    #[test]
    fn a_leader_that_cannot_renew_within_the_deadline_reports_the_loss() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        let LeaseAction::Create(lease) = e.on_get(Ok(None), t0, wall(0)).unwrap() else {
            panic!()
        };
        e.on_write(Ok(stored(lease, 1)), t0);
        assert_eq!(e.leadership_change(t0), Some(true));
        let down = KubeError::Transport {
            url: "x".into(),
            timeout: true,
            message: "timed out".into(),
        };
        for s in [2, 4, 6, 8] {
            let t = t0 + Duration::from_secs(s);
            e.attempt(t, wall(s));
            e.on_write(Err(&down), t);
            assert_eq!(
                e.leadership_change(t),
                None,
                "still within the deadline at {s}s"
            );
        }
        // Never sleeps past the deadline.
        let t8 = t0 + Duration::from_secs(8);
        assert_eq!(e.next_attempt(t8, 0.0), t0 + Duration::from_secs(10));
        assert_eq!(
            e.leadership_change(t0 + Duration::from_secs(10)),
            Some(false)
        );
        assert!(!e.is_leader());
    }

    /// Guards the fence's deadline: it counts from when the renewal was sent, not
    /// when its reply came, since others may have seen the renewal at any instant
    /// in between.
    #[test]
    fn the_lease_is_valid_until_the_renew_deadline_after_the_write_was_sent() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut e = Elector::new(LeaseConfig::new("me"));
        assert_eq!(e.valid_until(), None, "a candidate may not write");
        let LeaseAction::Create(lease) = e.on_get(Ok(None), t0, wall(0)).unwrap() else {
            panic!()
        };
        // The create's reply takes 3 s.
        e.on_write(Ok(stored(lease, 1)), t0 + s(3));
        assert_eq!(e.valid_until(), Some(t0 + s(10)));
        let renew = e.attempt(t0 + s(5), wall(5));
        let LeaseAction::Update(lease) = renew else {
            panic!()
        };
        e.on_write(Ok(stored(lease, 2)), t0 + s(6));
        assert_eq!(e.valid_until(), Some(t0 + s(15)));
        assert_eq!(e.leadership_change(t0 + s(6)), Some(true));
        // Unrenewed past the deadline: no longer valid.
        e.attempt(t0 + s(15), wall(15));
        assert_eq!(e.valid_until(), None);
    }

    #[test]
    fn a_leader_that_sees_another_holder_stops_leading_at_once() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        let LeaseAction::Create(lease) = e.on_get(Ok(None), t0, wall(0)).unwrap() else {
            panic!()
        };
        e.on_write(Ok(stored(lease, 1)), t0);
        e.leadership_change(t0);
        e.on_write(Err(&conflict()), t0 + Duration::from_secs(2));
        e.on_get(
            Ok(Some(held_by("thief", 7, 2))),
            t0 + Duration::from_secs(2),
            wall(2),
        );
        assert_eq!(
            e.leadership_change(t0 + Duration::from_secs(2)),
            Some(false)
        );
    }

    #[test]
    fn release_clears_the_holder_and_keeps_the_transitions() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        assert_eq!(e.release(wall(0)), None, "a follower releases nothing");
        let take = e.on_get(Ok(Some(held_by("", 4, 0))), t0, wall(0)).unwrap();
        let LeaseAction::Update(lease) = take else {
            panic!()
        };
        e.on_write(Ok(stored(lease, 5)), t0);
        let released = e.release(wall(30)).unwrap();
        let s = released.spec.unwrap();
        assert_eq!(s.holder_identity, None);
        assert_eq!(s.lease_duration_seconds, Some(1));
        assert_eq!(s.lease_transitions, Some(4));
        assert_eq!(s.renew_time, Some(micro_time(wall(30))));
        assert_eq!(released.metadata.resource_version.as_deref(), Some("5"));
        assert!(!e.is_leader());
    }

    #[test]
    fn candidates_retry_with_jitter_and_the_config_is_validated() {
        let t0 = Instant::now();
        let e = Elector::new(LeaseConfig::new("me"));
        assert_eq!(e.next_attempt(t0, 0.0), t0 + Duration::from_secs(2));
        assert_eq!(e.next_attempt(t0, 1.0), t0 + Duration::from_millis(4400));
        let mut c = LeaseConfig::new("me");
        assert_eq!(c.validate(), Ok(()));
        c.renew_deadline = Duration::from_secs(20);
        assert!(c.validate().unwrap_err().contains("lease-duration"));
        let id = default_identity();
        let (host, suffix) = id.rsplit_once('_').unwrap();
        assert!(!host.is_empty() && suffix.len() == 36, "{id}");
        assert_ne!(id, default_identity());
    }

    #[test]
    fn a_candidate_wakes_when_the_lease_it_saw_runs_out() {
        let t0 = Instant::now();
        let mut e = Elector::new(LeaseConfig::new("me"));
        assert_eq!(
            e.on_get(Ok(Some(held_by("other", 5, 0))), t0, wall(900)),
            None
        );
        // Lease 15 s (held_by's duration), retry 2 s: far from expiry, the jittered retry.
        let early = t0 + Duration::from_secs(1);
        assert_eq!(
            e.next_attempt(early, 1.0),
            early + Duration::from_millis(4400)
        );
        // 1 s before expiry, it wakes at expiry (plus a margin), not 2-4.4 s later.
        let late = t0 + Duration::from_secs(14);
        assert_eq!(
            e.next_attempt(late, 1.0),
            t0 + Duration::from_secs(15) + EXPIRY_MARGIN
        );
    }
}
