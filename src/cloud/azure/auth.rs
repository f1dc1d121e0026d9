//! Entra ID tokens for Resource Manager: a client secret or a workload-identity
//! assertion exchanged at the authority's v2 token endpoint, or the VM's managed
//! identity from the instance metadata service.
//!
//! A token is kept and reused until five minutes before it expires (or a tenth of
//! its lifetime, for short ones), so that steady state sends no token request at all;
//! a 401 from Resource Manager drops it. The workload-identity file is read again for
//! every exchange, since the kubelet rotates it.
//!
//! Tokens and secrets live in [`Secret`] only; nothing here logs or formats them, and
//! errors name the identity, the endpoint and the authority's error code.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::config::{Config, Endpoints, Identity};
use crate::provider::{CloudError, CloudErrorKind};
use crate::secret::Secret;

/// The largest token reply read (a token is a few KiB).
const MAX_TOKEN_REPLY: u64 = 1 << 20;

/// A token and when it stops being used.
struct Cached {
    token: Secret,
    renew_at: SystemTime,
}

/// Gets and caches Resource Manager tokens for one identity.
pub(super) struct Tokens {
    identity: Identity,
    endpoints: Endpoints,
    tenant_id: String,
    imds: String,
    /// Entra ID.
    agent: ureq::Agent,
    /// The instance metadata service.
    imds_agent: ureq::Agent,
    cached: Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Tokens {
    pub(super) fn new(config: &Config) -> Tokens {
        let agent: ureq::Agent = crate::http::agent_config(&config.trust, &config.proxying)
            .http_status_as_error(false)
            .timeout_global(Some(config.request_timeout))
            // A secret goes to the authority named in the settings and nowhere else.
            .max_redirects(0)
            .user_agent(config.user_agent.as_str())
            .build()
            .into();
        // The metadata service is link-local: never through an HTTP(S)_PROXY (it
        // refuses proxied requests).
        let imds_agent: ureq::Agent =
            crate::http::agent_config(&config.trust, &crate::Proxying::Never)
                .http_status_as_error(false)
                // Off Azure the link-local address does not answer; fail fast.
                .timeout_connect(Some(Duration::from_secs(2)))
                .timeout_global(Some(config.request_timeout))
                .max_redirects(0)
                .user_agent(config.user_agent.as_str())
                .build()
                .into();
        Tokens {
            identity: config.identity.clone(),
            endpoints: config.endpoints.clone(),
            tenant_id: config.tenant_id.clone(),
            imds: config.imds_endpoint.clone(),
            agent,
            imds_agent,
            cached: Mutex::new(None),
        }
    }

    /// A token valid for a few minutes at least: the cached one, or a new one.
    pub(super) fn token(&self) -> Result<Secret, CloudError> {
        let now = SystemTime::now();
        if let Some(c) = crate::sync::lock(&self.cached).as_ref()
            && now < c.renew_at
        {
            return Ok(c.token.clone());
        }
        let (token, lifetime) = self.fetch()?;
        let renew_at = now + renew_after(lifetime);
        *crate::sync::lock(&self.cached) = Some(Cached {
            token: token.clone(),
            renew_at,
        });
        Ok(token)
    }

    /// Resource Manager refused the token (401): the next request gets a new one.
    pub(super) fn forget(&self) {
        *crate::sync::lock(&self.cached) = None;
    }

    fn fetch(&self) -> Result<(Secret, Duration), CloudError> {
        match &self.identity {
            Identity::ClientSecret { client_id, secret } => {
                self.exchange(client_id, &[("client_secret", secret.expose())])
            }
            Identity::WorkloadIdentity {
                client_id,
                token_file,
            } => {
                let assertion = std::fs::read_to_string(token_file).map_err(|e| {
                    CloudError::new(
                        CloudErrorKind::Retry { after: None },
                        format!(
                            "azure: workload identity: cannot read the service-account token \
                             {} ({e}); is the pod labelled azure.workload.identity/use=true and \
                             its service account annotated with the client ID?",
                            token_file.display()
                        ),
                    )
                })?;
                self.exchange(
                    client_id,
                    &[
                        (
                            "client_assertion_type",
                            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                        ),
                        ("client_assertion", assertion.trim()),
                    ],
                )
            }
            Identity::ManagedIdentity { client_id } => self.imds(client_id.as_deref()),
        }
    }

    /// The client-credentials grant at `<authority>/<tenant>/oauth2/v2.0/token`.
    fn exchange(
        &self,
        client_id: &str,
        credential: &[(&str, &str)],
    ) -> Result<(Secret, Duration), CloudError> {
        let url = format!(
            "{}/{}/oauth2/v2.0/token",
            self.endpoints.authority, self.tenant_id
        );
        let scope = format!("{}.default", with_slash(&self.endpoints.audience));
        let mut form = vec![
            ("grant_type", "client_credentials"),
            ("client_id", client_id),
            ("scope", scope.as_str()),
        ];
        form.extend_from_slice(credential);
        let body = encode_form(&form);
        let what = format!("token for {} from {url}", self.identity.describe());
        let sent = self
            .agent
            .post(&url)
            .header("Accept", "application/json")
            .content_type("application/x-www-form-urlencoded")
            .send(body.as_bytes());
        self.read_token(sent, &what)
    }

    /// A managed identity's token from the instance metadata service.
    fn imds(&self, client_id: Option<&str>) -> Result<(Secret, Duration), CloudError> {
        let mut url = format!(
            "{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource={}",
            self.imds,
            encode(&self.endpoints.audience)
        );
        if let Some(id) = client_id {
            // userAssignedIdentityID is a client ID or the identity's resource ID; the
            // latter is asked for as msi_res_id, as cloud-provider-azure's library does
            // (pkg/azclient/auth_func.go: a "/subscriptions/" inside makes it a resource ID).
            let parameter = if id.to_ascii_uppercase().contains("/SUBSCRIPTIONS/") {
                "&msi_res_id="
            } else {
                "&client_id="
            };
            url.push_str(parameter);
            url.push_str(&encode(id));
        }
        let what = format!(
            "token for {} from IMDS {}",
            self.identity.describe(),
            self.imds
        );
        let sent = self.imds_agent.get(&url).header("Metadata", "true").call();
        self.read_token(sent, &what)
    }

    fn read_token(
        &self,
        sent: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
        what: &str,
    ) -> Result<(Secret, Duration), CloudError> {
        let retry = |m: String| CloudError::new(CloudErrorKind::Retry { after: None }, m);
        let mut response = sent.map_err(|e| retry(format!("azure: {what}: {e}")))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_TOKEN_REPLY)
            .read_to_vec()
            .map_err(|e| retry(format!("azure: {what}: {e}")))?;
        parse_token_reply(status, &body)
            .map_err(|(kind, m)| CloudError::new(kind, format!("azure: {what}: {m}")))
    }
}

/// How long a token of `lifetime` is used: until five minutes before it expires, so
/// that a request never carries a token that runs out on its way (clock skew, a slow
/// reply); a short-lived one for its first tenth (at least a second).
pub(super) fn renew_after(lifetime: Duration) -> Duration {
    let margin = Duration::from_secs(300).min(lifetime / 10 * 9);
    lifetime.saturating_sub(margin).max(Duration::from_secs(1))
}

/// Reads a token reply: the token and its lifetime, or what went wrong. The
/// authority sends `expires_in` as a number, IMDS as a string.
pub(super) fn parse_token_reply(
    status: u16,
    body: &[u8],
) -> Result<(Secret, Duration), (CloudErrorKind, String)> {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |k: &str| json.get(k).and_then(|v| v.as_str()).unwrap_or("");
    if !(200..300).contains(&status) {
        let code = text("error");
        let description = text("error_description");
        let first_line = description.lines().next().unwrap_or("");
        // A refused credential is a setting to fix; anything else may pass.
        let kind = match status {
            400 | 401 | 403 => CloudErrorKind::Invalid,
            429 => CloudErrorKind::RateLimited {
                after: Duration::from_secs(5),
            },
            _ => CloudErrorKind::Retry { after: None },
        };
        let advice = match code {
            "invalid_client" | "unauthorized_client" => {
                "; check the client ID and secret (aadClientId, aadClientSecret) or the \
                 federated credential of the identity"
            }
            "invalid_request" if first_line.contains("AADSTS70021") => {
                "; no federated credential matches the service account: add one for \
                 system:serviceaccount:<namespace>:<name> with the cluster's issuer"
            }
            _ => "",
        };
        return Err((kind, format!("HTTP {status} {code}: {first_line}{advice}")));
    }
    let token = text("access_token");
    if token.is_empty() {
        return Err((
            CloudErrorKind::Retry { after: None },
            format!("HTTP {status}: the reply carries no access_token"),
        ));
    }
    let expires_in = match json.get("expires_in") {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        _ => None,
    }
    // Unknown lifetime: assume the shortest Entra issues, so it is renewed in time.
    .unwrap_or(300);
    Ok((Secret::new(token), Duration::from_secs(expires_in)))
}

fn with_slash(audience: &str) -> String {
    if audience.ends_with('/') {
        audience.to_string()
    } else {
        format!("{audience}/")
    }
}

/// Everything but RFC 3986's unreserved characters is escaped.
const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, ESCAPED).to_string()
}

/// `application/x-www-form-urlencoded`.
fn encode_form(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_replies_of_the_authority_and_of_imds_are_read() {
        let (t, life) = parse_token_reply(
            200,
            br#"{"token_type":"Bearer","expires_in":3599,"access_token":"eyJ0"}"#,
        )
        .unwrap();
        assert_eq!((t.expose(), life), ("eyJ0", Duration::from_secs(3599)));
        let (_, life) = parse_token_reply(
            200,
            br#"{"access_token":"x","expires_in":"86399","expires_on":"1","resource":"r"}"#,
        )
        .unwrap();
        assert_eq!(life, Duration::from_secs(86399));
    }

    #[test]
    fn a_refused_secret_is_invalid_and_names_the_fix_without_the_secret() {
        let (kind, m) = parse_token_reply(
            401,
            br#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided.\r\nTrace ID: 1"}"#,
        )
        .unwrap_err();
        assert_eq!(kind, CloudErrorKind::Invalid);
        assert!(
            m.contains("AADSTS7000215") && m.contains("aadClientSecret"),
            "{m}"
        );
        assert!(!m.contains("Trace ID"), "first line only: {m}");
        let (kind, _) = parse_token_reply(503, b"").unwrap_err();
        assert_eq!(kind, CloudErrorKind::Retry { after: None });
        assert!(parse_token_reply(200, b"{}").is_err());
    }

    #[test]
    fn tokens_are_renewed_five_minutes_before_they_expire() {
        let s = Duration::from_secs;
        assert_eq!(renew_after(s(3599)), s(3299));
        assert_eq!(renew_after(s(86399)), s(86099));
        assert_eq!(renew_after(s(100)), s(10));
        assert_eq!(renew_after(s(0)), s(1));
    }

    #[test]
    fn forms_are_encoded() {
        assert_eq!(
            encode_form(&[
                ("scope", "https://management.azure.com/.default"),
                ("a", "b c")
            ]),
            "scope=https%3A%2F%2Fmanagement.azure.com%2F.default&a=b%20c"
        );
    }
}
