//! The provider's keys: a fixed AccessKey pair, or temporary keys (an ECS RAM role's
//! from the instance metadata service, RRSA's from STS `AssumeRoleWithOIDC`) kept
//! until shortly before they expire and then fetched again. The metadata service is
//! link-local and never proxied; STS is reached as the APIs are. No key, token or
//! secret is ever logged or put in an error message.

use std::path::Path;
use std::time::SystemTime;

use serde::Deserialize;

use super::config::Credentials;
use crate::credentials::{Clock, Credentials as AnyKeys, Fetch, Refreshing, read_bounded};
use crate::provider::{CloudError, CloudErrorKind};
use crate::secret::Secret;
use crate::signing::parse_rfc3339_utc;

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

/// Where the keys come from: a fixed pair, or temporary keys kept by the refresh
/// the providers share (still-valid keys kept when a refresh fails, a pause after
/// failures, keys expired on arrival refused).
enum Source {
    Fixed(Keys),
    Temporary(Refreshing),
}

/// The source of the keys and the last keys it gave.
pub(super) struct Identity {
    source: Source,
    description: String,
    /// The time keys expire against: a test passes a virtual one.
    clock: Clock,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("source", &self.description)
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
        let description = source.describe().to_string();
        let source = match source {
            Credentials::AccessKey {
                id,
                secret,
                security_token,
                ..
            } => Source::Fixed(Keys {
                id,
                secret,
                security_token,
            }),
            Credentials::EcsRamRole { role } => Source::Temporary(Refreshing::new(EcsRamRole {
                role,
                metadata,
                metadata_endpoint,
            })),
            Credentials::Rrsa {
                role_arn,
                oidc_provider_arn,
                token_file,
                session_name,
            } => Source::Temporary(Refreshing::new(Rrsa {
                role_arn,
                oidc_provider_arn,
                token_file,
                session_name,
                api,
                sts_endpoint,
            })),
        };
        Identity {
            source,
            description,
            clock: std::sync::Arc::new(SystemTime::now),
        }
    }

    /// Keys expire against `clock` from now on (tests: a virtual clock).
    pub(super) fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// The time of the provider's clock (the one keys expire against): what the
    /// provider's own ages (the quota's, the network's) are measured with too.
    pub(super) fn now(&self) -> SystemTime {
        (self.clock)()
    }

    /// The keys to sign the next request with, fetched again when they are about to
    /// expire.
    pub(super) fn keys(&self) -> Result<Keys, CloudError> {
        match &self.source {
            Source::Fixed(keys) => Ok(keys.clone()),
            Source::Temporary(refreshing) => {
                let c = refreshing.current((self.clock)())?;
                Ok(Keys {
                    id: c.access_key_id().to_string(),
                    secret: Secret::new(c.secret_access_key()),
                    security_token: c.session_token().map(Secret::new),
                })
            }
        }
    }

    /// Forgets the keys (the cloud said they expired): the next request fetches new ones.
    pub(super) fn invalidate(&self) {
        if let Source::Temporary(refreshing) = &self.source {
            refreshing.invalidate();
        }
    }
}

/// An ECS RAM role's keys from the instance metadata service.
struct EcsRamRole {
    /// `None`: the role attached to the instance.
    role: Option<String>,
    metadata: ureq::Agent,
    metadata_endpoint: String,
}

impl Fetch for EcsRamRole {
    fn fetch(&self, _now: SystemTime) -> Result<AnyKeys, CloudError> {
        let role = match &self.role {
            Some(r) => r.clone(),
            None => self.attached_role()?,
        };
        let body = metadata_get(
            &self.metadata,
            &self.metadata_endpoint,
            &format!(
                "/latest/meta-data/ram/security-credentials/{}",
                crate::percent::encode(&role)
            ),
        )?;
        let keys: TemporaryKeys = serde_json::from_str(&body).map_err(|_| {
            retry(format!(
                "alibaba: the metadata service's keys for RAM role {role} are not \
                 the expected JSON"
            ))
        })?;
        temporary(keys)
    }

    fn origin(&self) -> String {
        format!(
            "Alibaba Cloud's ECS RAM role {} (metadata service {})",
            self.role.as_deref().unwrap_or("attached to the instance"),
            self.metadata_endpoint
        )
    }
}

impl EcsRamRole {
    /// The RAM role attached to this instance.
    fn attached_role(&self) -> Result<String, CloudError> {
        let list = metadata_get(
            &self.metadata,
            &self.metadata_endpoint,
            "/latest/meta-data/ram/security-credentials/",
        )?;
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
}

/// RRSA: the service account's token exchanged at STS `AssumeRoleWithOIDC`.
struct Rrsa {
    role_arn: String,
    oidc_provider_arn: String,
    token_file: std::path::PathBuf,
    session_name: String,
    /// Reaches STS (through the proxy the environment names).
    api: ureq::Agent,
    sts_endpoint: String,
}

impl Fetch for Rrsa {
    fn fetch(&self, _now: SystemTime) -> Result<AnyKeys, CloudError> {
        let token = read_token(&self.token_file)?;
        let keys = self.assume_role_with_oidc(
            &self.role_arn,
            &self.oidc_provider_arn,
            &token,
            &self.session_name,
        )?;
        temporary(keys)
    }

    fn origin(&self) -> String {
        format!(
            "Alibaba Cloud RRSA (role {}, token file {})",
            self.role_arn,
            self.token_file.display()
        )
    }
}

impl Rrsa {
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

/// Temporary keys with their expiry, which the shared refresh keeps them until.
fn temporary(keys: TemporaryKeys) -> Result<AnyKeys, CloudError> {
    let expiry = parse_rfc3339_utc(&keys.expiration).ok_or_else(|| {
        retry(format!(
            "alibaba: temporary keys with an unreadable Expiration {:?}",
            keys.expiration
        ))
    })?;
    Ok(AnyKeys::new(&keys.access_key_id, &keys.access_key_secret)
        .with_session_token(&keys.security_token)
        .with_expiry(expiry))
}

/// The service account's token, read at every refresh: the kubelet rotates it.
fn read_token(path: &Path) -> Result<Secret, CloudError> {
    let text = read_bounded(path, TOKEN_LIMIT, "RRSA token file").map_err(|e| {
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

    /// Guards the reading of temporary keys: the Expiration becomes the expiry the
    /// shared refresh works from; an unreadable one is an error, not keys kept for ever.
    #[test]
    fn temporary_keys_carry_their_expiry() {
        let keys = |expiration: &str| TemporaryKeys {
            access_key_id: "STS.id".into(),
            access_key_secret: "s".into(),
            security_token: "t".into(),
            expiration: expiration.into(),
        };
        let hour = temporary(keys("2023-11-14T23:13:20Z")).unwrap();
        assert_eq!(
            hour.expires(),
            Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_003_600))
        );
        assert_eq!(hour.session_token(), Some("t"));
        assert!(temporary(keys("soon")).is_err());
    }
}
