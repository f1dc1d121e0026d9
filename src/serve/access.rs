//! Who may read what on the secure port: paths that are always open (the probes),
//! and for the rest a bearer token checked with a TokenReview and the request with a
//! SubjectAccessReview, as the CCM and controller-runtime do for `/metrics`.
//!
//! [`Access`] is the decision logic, sans IO: it owns the caches, is fed the time and
//! the answers of reviews, and says for each request whether to answer now or to ask
//! the API server first. The asking happens on a [`Reviewer`] thread (blocking HTTP),
//! never on the server's poll thread, so a slow API server delays scrapes but never a
//! probe. The caches keep a scrape every 15 s to about one review pair per
//! [`AccessConfig::allowed_ttl`], and a flood of made-up tokens to a bounded table and
//! a bounded queue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::UserInfo;
use sha2::{Digest, Sha256};

use crate::kube::Client;
use crate::kube::review::{TokenIdentity, review_access, review_token};
use crate::secret::Secret;

/// The verb a `GET` or `HEAD` is authorized as (as the API server's filters do).
const VERB: &str = "get";
/// Most entries in each cache; a full cache drops its expired entries, then all.
const MAX_ENTRIES: usize = 4096;

/// Settings of delegated authorization. See [`AccessConfig::new`] for the defaults.
#[derive(Clone, Debug)]
pub struct AccessConfig {
    /// Paths served without a token (`--authorization-always-allow-paths`; default
    /// `/healthz`, `/readyz`, `/livez`). An entry ending in `*` is a prefix.
    pub always_allow_paths: Vec<String>,
    /// How long a TokenReview that authenticated a token is trusted (default 30 s).
    pub authenticated_ttl: Duration,
    /// How long an allowed SubjectAccessReview is trusted (default 30 s).
    pub allowed_ttl: Duration,
    /// How long a refusal (bad token, denied access) is remembered (default 10 s).
    pub denied_ttl: Duration,
}

impl AccessConfig {
    /// The CCM's defaults for the always-allowed paths, and this server's cache TTLs.
    pub fn new() -> AccessConfig {
        AccessConfig {
            always_allow_paths: DEFAULT_ALWAYS_ALLOW_PATHS
                .iter()
                .map(|p| p.to_string())
                .collect(),
            authenticated_ttl: Duration::from_secs(30),
            allowed_ttl: Duration::from_secs(30),
            denied_ttl: Duration::from_secs(10),
        }
    }

    /// Whether `path` is served without a token.
    pub fn always_allowed(&self, path: &str) -> bool {
        self.always_allow_paths
            .iter()
            .any(|p| match p.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => p == path,
            })
    }
}

impl Default for AccessConfig {
    fn default() -> AccessConfig {
        AccessConfig::new()
    }
}

/// The CCM's default of `--authorization-always-allow-paths`.
pub const DEFAULT_ALWAYS_ALLOW_PATHS: [&str; 3] = ["/healthz", "/readyz", "/livez"];

/// The API server calls behind the decision, on a thread of their own.
pub trait Reviewer: Send + Sync {
    /// Who `token` belongs to; `Err` when the question could not be answered.
    fn authenticate(&self, token: &Secret) -> Result<TokenIdentity, String>;
    /// Whether `user` may `get` `path`: `Ok(Ok(()))` allowed, `Ok(Err(reason))` denied,
    /// `Err` when the question could not be answered.
    fn authorize(&self, user: &UserInfo, path: &str) -> Result<Result<(), String>, String>;
}

/// The reviews of the CCM's delegated authentication and authorization: a
/// TokenReview on one API server connection (`--authentication-kubeconfig`), a
/// SubjectAccessReview on another (`--authorization-kubeconfig`); usually both are
/// the controller's own connection.
#[derive(Clone, Debug)]
pub struct DelegatedReviewer {
    /// Where TokenReviews go.
    pub authentication: Client,
    /// Where SubjectAccessReviews go.
    pub authorization: Client,
}

impl Reviewer for DelegatedReviewer {
    fn authenticate(&self, token: &Secret) -> Result<TokenIdentity, String> {
        review_token(&self.authentication, token).map_err(|e| e.to_string())
    }

    fn authorize(&self, user: &UserInfo, path: &str) -> Result<Result<(), String>, String> {
        review_access(&self.authorization, user, VERB, path).map_err(|e| e.to_string())
    }
}

/// What to do with a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Decision {
    Allow,
    /// 401: no token, or a token the API server does not know.
    Unauthenticated(String),
    /// 403: a known user without the RBAC for the path.
    Forbidden(String),
    /// 503: the API server could not be asked, or too many reviews wait already.
    Unavailable(String),
}

/// A review the server's thread hands to the reviewer thread.
#[derive(Debug)]
pub(super) struct ReviewJob {
    pub key: ReviewKey,
    pub token: Secret,
    /// Known already (from the token cache): only the access review is needed.
    pub user: Option<UserInfo>,
}

/// A request's identity for the caches and for joining waiting requests: the hash of
/// its token (the token itself is not kept as a key) and its path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct ReviewKey {
    token: [u8; 32],
    pub path: String,
}

impl ReviewKey {
    pub(super) fn new(token: &Secret, path: &str) -> ReviewKey {
        ReviewKey {
            token: Sha256::digest(token.expose().as_bytes()).into(),
            path: path.to_string(),
        }
    }
}

/// The reviewer thread's answer.
#[derive(Debug)]
pub(super) struct ReviewDone {
    pub key: ReviewKey,
    /// `None` if the job came with its user.
    pub authenticated: Option<Result<TokenIdentity, String>>,
    /// `None` if authentication failed, so nothing was asked.
    pub authorized: Option<Result<Result<(), String>, String>>,
}

/// What to do with a request that [`Access::ask`] was asked about.
#[derive(Debug)]
pub(super) enum Ask {
    /// Answer now.
    Now(Decision),
    /// Run this review, and answer when it is done.
    Review(ReviewJob),
    /// A review for the same token and path is running: answer when it is done.
    Wait(ReviewKey),
}

/// The access decision and its caches. Owned by the server's poll thread.
pub(super) struct Access {
    config: AccessConfig,
    /// Token hash -> (expiry, the authenticator's answer).
    tokens: HashMap<[u8; 32], (Instant, Result<UserInfo, String>)>,
    /// (user key, path) -> (expiry, allowed or the reason of the denial).
    grants: HashMap<(String, String), (Instant, Result<(), String>)>,
    /// Reviews running now.
    running: HashSet<ReviewKey>,
}

impl Access {
    pub(super) fn new(config: AccessConfig) -> Access {
        Access {
            config,
            tokens: HashMap::new(),
            grants: HashMap::new(),
            running: HashSet::new(),
        }
    }

    /// The decision for a request of `path` with `bearer` at `now`.
    pub(super) fn ask(&mut self, path: &str, bearer: Option<&Secret>, now: Instant) -> Ask {
        if self.config.always_allowed(path) {
            return Ask::Now(Decision::Allow);
        }
        let Some(token) = bearer else {
            return Ask::Now(Decision::Unauthenticated(
                "send a bearer token (Authorization: Bearer TOKEN) of a ServiceAccount allowed to get this path"
                    .into(),
            ));
        };
        let key = ReviewKey::new(token, path);
        let user = match self.tokens.get(&key.token) {
            Some((expiry, answer)) if *expiry > now => match answer {
                Ok(user) => Some(user.clone()),
                Err(why) => return Ask::Now(Decision::Unauthenticated(why.clone())),
            },
            _ => None,
        };
        if let Some(user) = &user
            && let Some((expiry, grant)) = self.grants.get(&(user_key(user), path.to_string()))
            && *expiry > now
        {
            return Ask::Now(match grant {
                Ok(()) => Decision::Allow,
                Err(why) => Decision::Forbidden(why.clone()),
            });
        }
        if !self.running.insert(key.clone()) {
            return Ask::Wait(key);
        }
        Ask::Review(ReviewJob {
            key,
            token: token.clone(),
            user,
        })
    }

    /// The job could not be queued: forget it, so that the next request tries again.
    pub(super) fn not_queued(&mut self, key: &ReviewKey) {
        self.running.remove(key);
    }

    /// Records a finished review at `now` and returns the decision for every request
    /// that waits on its key. Failures to ask are not cached: the next request asks
    /// again.
    pub(super) fn done(&mut self, done: ReviewDone, now: Instant) -> Decision {
        self.running.remove(&done.key);
        let user = match done.authenticated {
            None => None,
            Some(Err(e)) => {
                return Decision::Unavailable(format!(
                    "cannot check the token with the API server (TokenReview): {e}"
                ));
            }
            Some(Ok(TokenIdentity::Unauthenticated(why))) => {
                let expiry = now + self.config.denied_ttl;
                bounded_insert(
                    &mut self.tokens,
                    done.key.token,
                    (expiry, Err(why.clone())),
                    now,
                );
                return Decision::Unauthenticated(why);
            }
            Some(Ok(TokenIdentity::User(user))) => {
                let expiry = now + self.config.authenticated_ttl;
                bounded_insert(
                    &mut self.tokens,
                    done.key.token,
                    (expiry, Ok(user.clone())),
                    now,
                );
                Some(user)
            }
        };
        let user = match user {
            Some(user) => user,
            None => match self.tokens.get(&done.key.token) {
                Some((_, Ok(user))) => user.clone(),
                _ => {
                    return Decision::Unavailable(
                        "the token's identity expired while its access was checked; retry".into(),
                    );
                }
            },
        };
        let grant = match done.authorized {
            Some(Ok(grant)) => grant,
            Some(Err(e)) => {
                return Decision::Unavailable(format!(
                    "cannot check access with the API server (SubjectAccessReview): {e}"
                ));
            }
            None => return Decision::Unavailable("no access review was made; retry".into()),
        };
        let ttl = match grant {
            Ok(()) => self.config.allowed_ttl,
            Err(_) => self.config.denied_ttl,
        };
        let cache_key = (user_key(&user), done.key.path.clone());
        bounded_insert(&mut self.grants, cache_key, (now + ttl, grant.clone()), now);
        match grant {
            Ok(()) => Decision::Allow,
            Err(why) => Decision::Forbidden(format!(
                "{} may not get {}: {why}",
                user.username.as_deref().unwrap_or("the user"),
                done.key.path
            )),
        }
    }
}

/// A user as the authorizer sees it: name, uid and groups (two tokens of one
/// ServiceAccount share their grants).
fn user_key(user: &UserInfo) -> String {
    let mut groups = user.groups.clone().unwrap_or_default();
    groups.sort();
    format!(
        "{}\n{}\n{}",
        user.username.as_deref().unwrap_or(""),
        user.uid.as_deref().unwrap_or(""),
        groups.join(",")
    )
}

fn bounded_insert<K: Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, (Instant, V)>,
    key: K,
    value: (Instant, V),
    now: Instant,
) {
    if map.len() >= MAX_ENTRIES {
        map.retain(|_, (expiry, _)| *expiry > now);
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
    }
    map.insert(key, value);
}

/// Runs one job against the API server (blocking): the TokenReview unless the user is
/// known, then the SubjectAccessReview.
pub(super) fn run_review(reviewer: &Arc<dyn Reviewer>, job: ReviewJob) -> ReviewDone {
    let (authenticated, user) = match job.user {
        Some(user) => (None, Some(user)),
        None => {
            let answer = reviewer.authenticate(&job.token);
            let user = match &answer {
                Ok(TokenIdentity::User(u)) => Some(u.clone()),
                _ => None,
            };
            (Some(answer), user)
        }
    };
    let authorized = user.map(|u| reviewer.authorize(&u, &job.key.path));
    ReviewDone {
        key: job.key,
        authenticated,
        authorized,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> UserInfo {
        UserInfo {
            username: Some(name.into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            ..UserInfo::default()
        }
    }

    fn job(ask: Ask) -> ReviewJob {
        match ask {
            Ask::Review(job) => job,
            other => panic!("expected a review, got {other:?}"),
        }
    }

    fn done(
        job: ReviewJob,
        authn: Option<TokenIdentity>,
        authz: Option<Result<(), String>>,
    ) -> ReviewDone {
        ReviewDone {
            key: job.key,
            authenticated: authn.map(Ok),
            authorized: authz.map(Ok),
        }
    }

    #[test]
    fn probes_are_open_and_everything_else_needs_a_token() {
        let mut access = Access::new(AccessConfig::new());
        let t0 = Instant::now();
        for path in ["/healthz", "/readyz", "/livez"] {
            assert!(matches!(
                access.ask(path, None, t0),
                Ask::Now(Decision::Allow)
            ));
        }
        assert!(matches!(
            access.ask("/metrics", None, t0),
            Ask::Now(Decision::Unauthenticated(_))
        ));
        let mut config = AccessConfig::new();
        config.always_allow_paths = vec!["/debug/*".into()];
        let mut access = Access::new(config);
        assert!(matches!(
            access.ask("/debug/x", None, t0),
            Ask::Now(Decision::Allow)
        ));
        assert!(matches!(
            access.ask("/healthz", None, t0),
            Ask::Now(Decision::Unauthenticated(_))
        ));
    }

    /// Guards the caches: a scrape every 15 s reviews once per TTL, not per scrape,
    /// and concurrent requests with one token share one review.
    #[test]
    fn a_scrape_every_15s_costs_one_review_pair_per_ttl() {
        let config = AccessConfig::new();
        let mut access = Access::new(config.clone());
        let token = Secret::new("t");
        let t0 = Instant::now();
        let first = job(access.ask("/metrics", Some(&token), t0));
        assert!(
            first.user.is_none(),
            "the first request reviews the token too"
        );
        assert!(
            matches!(access.ask("/metrics", Some(&token), t0), Ask::Wait(_)),
            "a second request waits on the running review"
        );
        let decision = done(first, Some(TokenIdentity::User(user("prom"))), Some(Ok(())));
        assert_eq!(access.done(decision, t0), Decision::Allow);

        let mut reviews = 1;
        let mut now = t0;
        while now < t0 + Duration::from_secs(300) {
            now += Duration::from_secs(15);
            match access.ask("/metrics", Some(&token), now) {
                Ask::Now(Decision::Allow) => {}
                Ask::Review(j) => {
                    reviews += 1;
                    let authn = j.user.is_none().then(|| TokenIdentity::User(user("prom")));
                    let d = access.done(done(j, authn, Some(Ok(()))), now);
                    assert_eq!(d, Decision::Allow);
                }
                other => panic!("{other:?}"),
            }
        }
        // 20 scrapes in 300 s with a 30 s TTL: a review every other scrape.
        assert_eq!(reviews, 1 + 300 / 30, "reviews in 300 s");
    }

    #[test]
    fn bad_tokens_get_401_denied_users_403_and_both_are_remembered_briefly() {
        let config = AccessConfig::new();
        let mut access = Access::new(config.clone());
        let t0 = Instant::now();
        let bad = Secret::new("bad");
        let j = job(access.ask("/metrics", Some(&bad), t0));
        let d = access.done(
            done(
                j,
                Some(TokenIdentity::Unauthenticated("expired".into())),
                None,
            ),
            t0,
        );
        assert_eq!(d, Decision::Unauthenticated("expired".into()));
        assert!(matches!(
            access.ask("/metrics", Some(&bad), t0 + Duration::from_secs(5)),
            Ask::Now(Decision::Unauthenticated(_))
        ));
        assert!(matches!(
            access.ask("/metrics", Some(&bad), t0 + config.denied_ttl),
            Ask::Review(_)
        ));

        let nobody = Secret::new("nobody");
        let j = job(access.ask("/metrics", Some(&nobody), t0));
        let d = access.done(
            done(
                j,
                Some(TokenIdentity::User(user("nobody"))),
                Some(Err("no rule".into())),
            ),
            t0,
        );
        assert!(
            matches!(&d, Decision::Forbidden(why) if why.contains("nobody may not get /metrics: no rule")),
            "{d:?}"
        );
        assert!(matches!(
            access.ask("/metrics", Some(&nobody), t0 + Duration::from_secs(1)),
            Ask::Now(Decision::Forbidden(_))
        ));
    }

    #[test]
    fn an_api_server_that_cannot_be_asked_gives_503_and_nothing_is_cached() {
        let mut access = Access::new(AccessConfig::new());
        let t0 = Instant::now();
        let token = Secret::new("t");
        let j = job(access.ask("/metrics", Some(&token), t0));
        let d = access.done(
            ReviewDone {
                key: j.key,
                authenticated: Some(Err("connection refused".into())),
                authorized: None,
            },
            t0,
        );
        assert!(matches!(&d, Decision::Unavailable(why) if why.contains("connection refused")));
        assert!(matches!(
            access.ask("/metrics", Some(&token), t0),
            Ask::Review(_)
        ));
    }

    #[test]
    fn a_flood_of_tokens_keeps_the_cache_bounded() {
        let mut access = Access::new(AccessConfig::new());
        let t0 = Instant::now();
        for i in 0..(MAX_ENTRIES * 2) {
            let token = Secret::new(format!("made-up-{i}"));
            let j = job(access.ask("/metrics", Some(&token), t0));
            access.done(
                done(j, Some(TokenIdentity::Unauthenticated("no".into())), None),
                t0,
            );
        }
        assert!(access.tokens.len() <= MAX_ENTRIES);
        assert!(access.running.is_empty());
    }
}
