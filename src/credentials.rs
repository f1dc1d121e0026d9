//! Temporary cloud keys shared by the providers that sign their own requests (aws,
//! alibaba): a key pair, one source of fresh ones ([`Fetch`]), and [`Refreshing`],
//! which keeps them until shortly before they expire, keeps still-valid ones when a
//! refresh fails, pauses after failures and refuses keys that arrive expired. A leaf:
//! it knows no provider; each [`Fetch::origin`] names its provider and source.
//! Secrets live only in [`Credentials`] (as [`Secret`]s, whose `Debug` output is
//! redacted); nothing here logs a secret.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::provider::{CloudError, CloudErrorKind};
use crate::secret::Secret;

/// A source of wall-clock time (signing dates, credential expiry).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Credentials are refreshed this long before they expire (IMDS offers new ones at
/// least five minutes before the old ones expire).
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);
/// If a source still hands out credentials close to expiry, ask again only this often.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// An access key pair, possibly temporary.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key_id: String,
    secret_access_key: Secret,
    session_token: Option<Secret>,
    expires: Option<SystemTime>,
}

impl Credentials {
    /// A long-lived pair (no session token, no expiry).
    pub fn new(access_key_id: &str, secret_access_key: &str) -> Credentials {
        Credentials {
            access_key_id: access_key_id.to_string(),
            secret_access_key: Secret::new(secret_access_key),
            session_token: None,
            expires: None,
        }
    }

    /// Temporary credentials carry a session token, sent as `X-Amz-Security-Token`;
    /// an empty one is none (a header with no value would be refused).
    pub fn with_session_token(mut self, token: &str) -> Credentials {
        self.session_token = (!token.is_empty()).then(|| Secret::new(token));
        self
    }

    /// Temporary credentials: when they stop working.
    pub fn with_expiry(mut self, expires: SystemTime) -> Credentials {
        self.expires = Some(expires);
        self
    }

    /// The key ID (not a secret).
    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    /// The secret, for signing only.
    pub fn secret_access_key(&self) -> &str {
        self.secret_access_key.expose()
    }

    /// The session token of temporary credentials.
    pub fn session_token(&self) -> Option<&str> {
        self.session_token.as_ref().map(Secret::expose)
    }

    /// When they stop working; `None`: never.
    pub fn expires(&self) -> Option<SystemTime> {
        self.expires
    }

    /// The key ID shortened for messages: `AKIA…MPLE`. A key ID is not a secret, but
    /// there is no need to spread it whole either.
    pub fn key_hint(&self) -> String {
        let id = &self.access_key_id;
        if id.len() <= 8 || !id.is_ascii() {
            return id.clone();
        }
        format!("{}…{}", &id[..4], &id[id.len() - 4..])
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.key_hint())
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires", &self.expires)
            .finish()
    }
}

// --- refreshing temporary credentials ---------------------------------------------------

/// One source of temporary credentials: one fetch is one request (or process run).
pub trait Fetch: Send + Sync {
    /// Fresh credentials. An error's kind says whether asking again may help
    /// (`Retry`) or a setting must change (`Invalid`).
    fn fetch(&self, now: SystemTime) -> Result<Credentials, CloudError>;
    /// Where they come from, for the log and messages; never a secret.
    fn origin(&self) -> String;
}

/// Temporary credentials, fetched on first use and again [`REFRESH_BEFORE_EXPIRY`]
/// before they expire (as the SDKs' credential caches do), by whichever thread needs
/// them first; the others wait for that one fetch rather than all asking at once.
///
/// A failed fetch is not repeated on every request: the next one waits
/// [`failure_pause`] (1 s, doubling to [`MIN_REFRESH_INTERVAL`]), during which
/// credentials still valid keep being used and, without them, the last error is
/// returned. Credentials that arrive already expired count as a failure: signing with
/// them could only earn `ExpiredToken` for every request.
pub struct Refreshing {
    fetch: Box<dyn Fetch>,
    state: Mutex<RefreshState>,
}

#[derive(Default)]
struct RefreshState {
    cached: Option<Fetched>,
    /// The failures since the last good fetch, the last one's error and when the
    /// next fetch may be tried.
    failures: u32,
    last_error: Option<CloudError>,
    next_attempt: Option<SystemTime>,
}

struct Fetched {
    credentials: Credentials,
    /// `None`: they never expire (a `credential_process` without `Expiration`).
    refresh_at: Option<SystemTime>,
}

impl fmt::Debug for Refreshing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refreshing")
            .field("origin", &self.fetch.origin())
            .finish_non_exhaustive()
    }
}

/// When credentials fetched at `fetched` and expiring at `expires` should be fetched
/// again: [`REFRESH_BEFORE_EXPIRY`] ahead of expiry, but not sooner than
/// [`MIN_REFRESH_INTERVAL`] after the fetch (nor after the expiry itself).
pub fn refresh_at(fetched: SystemTime, expires: Option<SystemTime>) -> Option<SystemTime> {
    let expires = expires?;
    let early = expires
        .checked_sub(REFRESH_BEFORE_EXPIRY)
        .unwrap_or(expires);
    let not_before = (fetched + MIN_REFRESH_INTERVAL).min(expires);
    Some(early.max(not_before))
}

/// How long to wait before fetching again after `failures` failed fetches in a row.
pub fn failure_pause(failures: u32) -> Duration {
    crate::backoff::delay(
        Duration::from_secs(1),
        failures,
        MIN_REFRESH_INTERVAL,
        (1.0, 1.0),
        0.0,
    )
}

impl Refreshing {
    /// Credentials from `fetch`, fetched on first use.
    pub fn new(fetch: impl Fetch + 'static) -> Refreshing {
        Refreshing {
            fetch: Box::new(fetch),
            state: Mutex::new(RefreshState::default()),
        }
    }

    /// Credentials valid at `now`: the cached ones, or fetched again when due.
    pub fn current(&self, now: SystemTime) -> Result<Credentials, CloudError> {
        let mut state = crate::sync::lock(&self.state);
        let valid = |f: &Fetched| f.credentials.expires().is_none_or(|exp| now < exp);
        if let Some(f) = state.cached.as_ref()
            && f.refresh_at.is_none_or(|at| now < at)
        {
            return Ok(f.credentials.clone());
        }
        if let Some(next) = state.next_attempt
            && now < next
        {
            if let Some(f) = state.cached.as_ref().filter(|f| valid(f)) {
                return Ok(f.credentials.clone());
            }
            if let Some(e) = &state.last_error {
                return Err(
                    self.no_credentials(e, Some(next.duration_since(now).unwrap_or_default()))
                );
            }
        }
        let fetched = self
            .fetch
            .fetch(now)
            .and_then(|credentials| match credentials.expires() {
                Some(exp) if exp <= now => Err(CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!(
                        "the credentials it returned had expired {} before they arrived; \
                         if this machine's clock is right, the source hands out stale \
                         credentials",
                        crate::duration::format(now.duration_since(exp).unwrap_or_default())
                    ),
                )),
                _ => Ok(credentials),
            });
        match fetched {
            Ok(credentials) => {
                log::debug!(
                    "fetched credentials {} from {}",
                    credentials.key_hint(),
                    self.fetch.origin()
                );
                *state = RefreshState {
                    cached: Some(Fetched {
                        refresh_at: refresh_at(now, credentials.expires()),
                        credentials: credentials.clone(),
                    }),
                    ..RefreshState::default()
                };
                Ok(credentials)
            }
            Err(e) => {
                state.failures += 1;
                let pause = failure_pause(state.failures);
                state.next_attempt = Some(now + pause);
                let result = match state.cached.as_ref().filter(|f| valid(f)) {
                    // Still valid: keep using them and try again after the pause.
                    Some(f) => {
                        log::warn!(
                            "refreshing the credentials from {} failed (trying again in {}): {}",
                            self.fetch.origin(),
                            crate::duration::format(pause),
                            e.message
                        );
                        Ok(f.credentials.clone())
                    }
                    None => Err(self.no_credentials(&e, None)),
                };
                state.last_error = Some(e);
                result
            }
        }
    }

    /// Where the credentials come from; never a secret.
    pub fn origin(&self) -> String {
        self.fetch.origin()
    }

    /// Forgets the credentials (the cloud refused them before their expiry: revoked,
    /// or this clock is behind): the next [`Refreshing::current`] fetches new ones at
    /// once, whatever pause a failure set.
    pub fn invalidate(&self) {
        let mut state = crate::sync::lock(&self.state);
        state.cached = None;
        state.next_attempt = None;
    }

    fn no_credentials(&self, e: &CloudError, next_in: Option<Duration>) -> CloudError {
        CloudError::new(
            e.kind,
            format!(
                "no credentials from {}: {}{}",
                self.fetch.origin(),
                e.message,
                next_in
                    .map(|d| format!(" (asking again in {})", crate::duration::format(d)))
                    .unwrap_or_default()
            ),
        )
    }
}

/// Reads a small file named by a setting (a token), at most `limit` bytes, trimmed.
pub(crate) fn read_bounded(
    path: &std::path::Path,
    limit: u64,
    what: &str,
) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {what} {}: {e}", path.display()))?;
    if text.len() as u64 > limit {
        return Err(format!(
            "{what} {} is larger than {limit} bytes: is it the right file?",
            path.display()
        ));
    }
    Ok(text.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::UNIX_EPOCH;

    /// Numbered keys of an hour, counting the fetches.
    struct Numbered(Arc<AtomicU32>);

    impl Fetch for Numbered {
        fn fetch(&self, now: SystemTime) -> Result<Credentials, CloudError> {
            let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
            Ok(Credentials::new(&format!("KEY{n}"), "secret")
                .with_expiry(now + Duration::from_secs(3600)))
        }

        fn origin(&self) -> String {
            "the test's numbered keys".into()
        }
    }

    /// Guards `invalidate` (the cloud refused keys before their expiry): the next
    /// request fetches new keys at once instead of reusing the refused ones.
    #[test]
    fn invalidated_keys_are_fetched_again_at_the_next_request() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let fetches = Arc::new(AtomicU32::new(0));
        let source = Refreshing::new(Numbered(fetches.clone()));
        assert_eq!(source.current(t0).unwrap().access_key_id(), "KEY1");
        assert_eq!(source.current(t0).unwrap().access_key_id(), "KEY1");
        source.invalidate();
        assert_eq!(source.current(t0).unwrap().access_key_id(), "KEY2");
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
    }
}
