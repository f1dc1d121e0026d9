//! The provider's keys: a fixed AccessKey pair, or temporary keys (an ECS RAM role's
//! from the instance metadata service, RRSA's from STS `AssumeRoleWithOIDC`) kept
//! until shortly before they expire and then fetched again. The metadata service is
//! link-local and never proxied; STS is reached as the APIs are. No key, token or
//! secret is ever logged or put in an error message.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::config::Credentials;
use crate::provider::{CloudError, CloudErrorKind};
use crate::secret::Secret;
use crate::signing::parse_rfc3339_utc;
use crate::sync::lock;

/// Temporary keys are fetched again this long before they expire.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);
/// The STS API version of `AssumeRoleWithOIDC`.
const STS_VERSION: &str = "2015-04-01";
/// What RRSA asks STS for: an hour, the role's default maximum.
const RRSA_SECONDS: u64 = 3600;
/// The largest service account token read (a JWT is a few kB).
const TOKEN_LIMIT: u64 = 64 << 10;
/// The metadata service's hardened mode (IMDSv2-like): a token for this long.
const METADATA_TOKEN_SECONDS: &str = "21600";

/// A key pair to sign with.
#[derive(Clone, Debug)]
pub(super) struct Keys {
    pub id: String,
    pub secret: Secret,
    pub security_token: Option<Secret>,
}

#[derive(Debug)]
struct Cached {
    keys: Keys,
    /// When to fetch again; `None`: never (a fixed pair).
    refresh_at: Option<SystemTime>,
}

/// The source of the keys and the last keys it gave.
pub(super) struct Identity {
    source: Credentials,
    /// Reaches STS (through the proxy the environment names).
    api: ureq::Agent,
    /// Reaches the metadata service, never through a proxy.
    metadata: ureq::Agent,
    sts_endpoint: String,
    metadata_endpoint: String,
    cached: Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("source", &self.source.describe())
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct TemporaryKeys {
    access_key_id: String,
    access_key_secret: String,
    security_token: String,
    expiration: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsReply {
    credentials: TemporaryKeys,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct ApiErrorBody {
    code: String,
    message: String,
}

impl Identity {
    pub(super) fn new(
        source: Credentials,
        api: ureq::Agent,
        metadata: ureq::Agent,
        sts_endpoint: String,
        metadata_endpoint: String,
    ) -> Identity {
        Identity {
            source,
            api,
            metadata,
            sts_endpoint,
            metadata_endpoint,
            cached: Mutex::new(None),
        }
    }

    /// The keys to sign the next request with, fetched again when they are about to
    /// expire.
    pub(super) fn keys(&self) -> Result<Keys, CloudError> {
        self.keys_at(SystemTime::now())
    }

    fn keys_at(&self, now: SystemTime) -> Result<Keys, CloudError> {
        let mut cached = lock(&self.cached);
        if let Some(c) = cached.as_ref()
            && c.refresh_at.is_none_or(|at| now < at)
        {
            return Ok(c.keys.clone());
        }
        let fresh = self.fetch(now)?;
        let keys = fresh.keys.clone();
        *cached = Some(fresh);
        Ok(keys)
    }

    /// Forgets the keys (the cloud said they expired): the next request fetches new ones.
    pub(super) fn invalidate(&self) {
        if !matches!(self.source, Credentials::AccessKey { .. }) {
            *lock(&self.cached) = None;
        }
    }

    fn fetch(&self, now: SystemTime) -> Result<Cached, CloudError> {
        match &self.source {
            Credentials::AccessKey {
                id,
                secret,
                security_token,
                ..
            } => Ok(Cached {
                keys: Keys {
                    id: id.clone(),
                    secret: secret.clone(),
                    security_token: security_token.clone(),
                },
                refresh_at: None,
            }),
            Credentials::EcsRamRole { role } => {
                let role = match role {
                    Some(r) => r.clone(),
                    None => self.attached_role()?,
                };
                let body = self.metadata_get(&format!(
                    "/latest/meta-data/ram/security-credentials/{}",
                    crate::percent::encode(&role)
                ))?;
                let keys: TemporaryKeys = serde_json::from_str(&body).map_err(|_| {
                    retry(format!(
                        "alibaba: the metadata service's keys for RAM role {role} are not \
                         the expected JSON"
                    ))
                })?;
                temporary(keys, now)
            }
            Credentials::Rrsa {
                role_arn,
                oidc_provider_arn,
                token_file,
                session_name,
            } => {
                let token = read_token(token_file)?;
                let keys =
                    self.assume_role_with_oidc(role_arn, oidc_provider_arn, &token, session_name)?;
                temporary(keys, now)
            }
        }
    }

    /// The RAM role attached to this instance.
    fn attached_role(&self) -> Result<String, CloudError> {
        let list = self.metadata_get("/latest/meta-data/ram/security-credentials/")?;
        list.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| l.trim_end_matches('/').to_string())
            .ok_or_else(|| {
                CloudError::invalid(
                    "alibaba: no AccessKey and no RAM role attached to this ECS instance: \
                     attach a RAM role, or set ALIBABA_CLOUD_ACCESS_KEY_ID and \
                     ALIBABA_CLOUD_ACCESS_KEY_SECRET (see the README's Alibaba Cloud section)",
                )
            })
    }

    pub(super) fn metadata_get(&self, path: &str) -> Result<String, CloudError> {
        metadata_get(&self.metadata, &self.metadata_endpoint, path)
    }

    fn assume_role_with_oidc(
        &self,
        role_arn: &str,
        provider_arn: &str,
        token: &Secret,
        session_name: &str,
    ) -> Result<TemporaryKeys, CloudError> {
        let timestamp = super::sign::acs_date(SystemTime::now());
        let query = super::sign::canonical_query(&[
            ("Action".into(), "AssumeRoleWithOIDC".into()),
            ("Format".into(), "JSON".into()),
            ("Version".into(), STS_VERSION.into()),
            ("Timestamp".into(), timestamp),
        ]);
        let form = [
            ("RoleArn", role_arn),
            ("OIDCProviderArn", provider_arn),
            ("OIDCToken", token.expose()),
            ("RoleSessionName", session_name),
            ("DurationSeconds", &RRSA_SECONDS.to_string()),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={}", crate::percent::encode(v)))
        .collect::<Vec<_>>()
        .join("&");
        let url = format!("{}/?{query}", self.sts_endpoint);
        let what = format!("alibaba: STS AssumeRoleWithOIDC for {role_arn}");
        let mut reply = self
            .api
            .post(&url)
            .content_type("application/x-www-form-urlencoded")
            .send(form.as_bytes())
            .map_err(|e| retry(format!("{what}: no reply ({})", crate::http::describe(&e))))?;
        let status = reply.status().as_u16();
        let body = reply
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_vec()
            .map_err(|e| retry(format!("{what}: {}", crate::http::describe(&e))))?;
        if (200..300).contains(&status) {
            let reply: StsReply = serde_json::from_slice(&body).map_err(|_| {
                retry(format!(
                    "{what}: HTTP {status}, a reply without Credentials"
                ))
            })?;
            return Ok(reply.credentials);
        }
        let error: ApiErrorBody = serde_json::from_slice(&body).unwrap_or_default();
        let message = format!(
            "{what}: HTTP {status} {}: {}",
            error.code,
            error.message.chars().take(300).collect::<String>()
        );
        Err(match status {
            500..=599 => retry(message),
            _ => CloudError::invalid(format!(
                "{message}; check that the role trusts the OIDC provider and the service \
                 account (the README's Alibaba Cloud section)"
            )),
        })
    }
}

/// A metadata value (`path` from `/latest/...`) of the service at `base`, with the
/// hardened mode's token when the service gives one.
pub(super) fn metadata_get(
    agent: &ureq::Agent,
    base: &str,
    path: &str,
) -> Result<String, CloudError> {
    let token = agent
        .put(&format!("{base}/latest/api/token"))
        .header(
            "X-aliyun-ecs-metadata-token-ttl-seconds",
            METADATA_TOKEN_SECONDS,
        )
        .send_empty()
        .ok()
        .filter(|r| r.status().is_success())
        .and_then(|mut r| r.body_mut().read_to_string().ok());
    let mut request = agent.get(&format!("{base}{path}"));
    if let Some(token) = &token {
        request = request.header("X-aliyun-ecs-metadata-token", token.trim());
    }
    let what = format!("alibaba: instance metadata {path}");
    let mut reply = request.call().map_err(|e| {
        retry(format!(
            "{what}: no reply ({}); outside ECS, set the keys in the environment and region \
             and vpcid in the cloud config",
            crate::http::describe(&e)
        ))
    })?;
    let status = reply.status().as_u16();
    let body = reply
        .body_mut()
        .with_config()
        .limit(64 << 10)
        .read_to_string()
        .map_err(|e| retry(format!("{what}: {}", crate::http::describe(&e))))?;
    match status {
        200..=299 => Ok(body.trim().to_string()),
        404 => Err(CloudError::invalid(format!("{what}: HTTP 404, not there"))),
        _ => Err(retry(format!("{what}: HTTP {status}"))),
    }
}

/// Temporary keys with the time to fetch them again: [`REFRESH_BEFORE`] their
/// expiry, or half-way through a shorter life.
fn temporary(keys: TemporaryKeys, now: SystemTime) -> Result<Cached, CloudError> {
    let expiry = parse_rfc3339_utc(&keys.expiration).ok_or_else(|| {
        retry(format!(
            "alibaba: temporary keys with an unreadable Expiration {:?}",
            keys.expiration
        ))
    })?;
    let life = expiry.duration_since(now).unwrap_or_default();
    let refresh_at = now + life.saturating_sub(REFRESH_BEFORE).max(life / 2);
    Ok(Cached {
        keys: Keys {
            id: keys.access_key_id,
            secret: Secret::new(keys.access_key_secret),
            security_token: Some(Secret::new(keys.security_token)),
        },
        refresh_at: Some(refresh_at),
    })
}

/// The service account's token, read at every refresh: the kubelet rotates it.
fn read_token(path: &Path) -> Result<Secret, CloudError> {
    let text = crate::cloud::aws::credentials::read_bounded(path, TOKEN_LIMIT, "RRSA token file")
        .map_err(|e| {
        CloudError::invalid(format!(
            "alibaba: {e}; mount the service account token there (ACK's pod identity \
                 webhook does)"
        ))
    })?;
    Ok(Secret::new(text))
}

fn retry(message: String) -> CloudError {
    CloudError::new(CloudErrorKind::Retry { after: None }, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the refresh rule: an hour's keys are kept until five minutes before
    /// they expire, keys of a short life until half of it; never past the expiry.
    #[test]
    fn temporary_keys_are_fetched_again_before_they_expire() {
        let now = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let keys = |expiration: &str| TemporaryKeys {
            access_key_id: "STS.id".into(),
            access_key_secret: "s".into(),
            security_token: "t".into(),
            expiration: expiration.into(),
        };
        // 2023-11-14T22:13:20Z is `now`.
        let hour = temporary(keys("2023-11-14T23:13:20Z"), now).unwrap();
        assert_eq!(hour.refresh_at, Some(now + Duration::from_secs(55 * 60)));
        let short = temporary(keys("2023-11-14T22:15:20Z"), now).unwrap();
        assert_eq!(short.refresh_at, Some(now + Duration::from_secs(60)));
        let gone = temporary(keys("2023-11-14T22:00:00Z"), now).unwrap();
        assert_eq!(gone.refresh_at, Some(now));
        assert!(temporary(keys("soon"), now).is_err());
    }
}
