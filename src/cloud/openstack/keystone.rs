//! Keystone v3: a token from `POST /v3/auth/tokens` (in the `X-Subject-Token` header),
//! kept until shortly before its `expires_at` and fetched again after a 401; and the
//! network endpoint for the region from the token's service catalog.
//!
//! This module never logs or formats a token, password or secret.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::json;

use super::config::{Credentials, ProjectRef, UserRef};
use crate::provider::{CloudError, CloudErrorKind, Meter};
use crate::secret::Secret;

/// A token is replaced this long before it expires, so that no request carries one
/// that expires on its way.
pub const REFRESH_BEFORE: Duration = Duration::from_secs(120);

struct Cached {
    token: Secret,
    refresh_at: Instant,
    network_url: String,
}

/// Issues and caches tokens. Safe to share between threads.
pub(super) struct Keystone {
    agent: ureq::Agent,
    auth_url: String,
    region: Option<String>,
    /// The catalog interface of the network endpoint (`public`, `internal`, `admin`).
    interface: String,
    credentials: Credentials,
    cached: Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Keystone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keystone")
            .field("auth_url", &self.auth_url)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct TokenReply {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    expires_at: String,
    #[serde(default)]
    issued_at: Option<String>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
}

#[derive(Deserialize)]
struct CatalogEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
struct Endpoint {
    #[serde(default)]
    interface: String,
    #[serde(default)]
    region_id: Option<String>,
    #[serde(default)]
    region: Option<String>,
    url: String,
}

impl Keystone {
    pub(super) fn new(
        agent: ureq::Agent,
        auth_url: &str,
        region: Option<String>,
        interface: String,
        credentials: Credentials,
    ) -> Keystone {
        Keystone {
            agent,
            auth_url: auth_url.trim_end_matches('/').to_string(),
            region,
            interface,
            credentials,
            cached: Mutex::new(None),
        }
    }

    /// A valid token and the network endpoint, issuing a new token if the cached one
    /// is near its end.
    pub(super) fn token(&self) -> Result<(Secret, String), CloudError> {
        let mut cached = crate::sync::lock(&self.cached);
        if let Some(c) = cached.as_ref()
            && Instant::now() < c.refresh_at
        {
            return Ok((c.token.clone(), c.network_url.clone()));
        }
        let fresh = self.issue()?;
        let out = (fresh.token.clone(), fresh.network_url.clone());
        *cached = Some(fresh);
        Ok(out)
    }

    /// Forgets the token (Neutron answered 401: revoked or expired early).
    pub(super) fn invalidate(&self) {
        *crate::sync::lock(&self.cached) = None;
    }

    fn body(&self) -> serde_json::Value {
        let domain = |(key, value): &(&str, String)| json!({ *key: value });
        match &self.credentials {
            Credentials::ApplicationCredential { id, secret } => json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": {"id": id, "secret": secret.expose()}
            }}}),
            Credentials::ApplicationCredentialByName { name, secret, user } => {
                let user = match user {
                    UserRef::Id(id) => json!({"id": id}),
                    UserRef::Name { name, domain: d } => json!({"name": name, "domain": domain(d)}),
                };
                json!({"auth": {"identity": {
                    "methods": ["application_credential"],
                    "application_credential": {"name": name, "secret": secret.expose(), "user": user}
                }}})
            }
            Credentials::Trust {
                trust_id,
                trustee,
                password,
            } => json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": password_user(trustee, password)}},
                "scope": {"OS-TRUST:trust": {"id": trust_id}}
            }}),
            Credentials::Password {
                user,
                password,
                project,
            } => {
                let user = password_user(user, password);
                let project = match project {
                    ProjectRef::Id(id) => json!({"id": id}),
                    ProjectRef::Name { name, domain: d } => {
                        json!({"name": name, "domain": domain(d)})
                    }
                };
                json!({"auth": {
                    "identity": {"methods": ["password"], "password": {"user": user}},
                    "scope": {"project": project}
                }})
            }
        }
    }

    fn issue(&self) -> Result<Cached, CloudError> {
        let url = format!("{}/auth/tokens", self.auth_url);
        let what = format!("openstack: POST {url}");
        Meter::request();
        let sent = self
            .agent
            .post(&url)
            .header("Accept", "application/json")
            .content_type("application/json")
            .send(self.body().to_string().as_bytes());
        let mut response = sent.map_err(|e| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("{what}: no reply ({e})"),
            )
        })?;
        let status = response.status().as_u16();
        let token = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .map(Secret::new);
        let bytes = response
            .body_mut()
            .with_config()
            .limit(8 << 20)
            .read_to_vec()
            .map_err(|e| {
                CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!("{what}: {e}"),
                )
            })?;
        match status {
            200..=299 => {}
            401 => {
                return Err(CloudError::invalid(format!(
                    "{what}: HTTP 401: Keystone refused the credentials; check \
                     application-credential-id/-secret (or username, password, domain and \
                     project) in cloud.conf"
                )));
            }
            400..=499 => {
                return Err(CloudError::invalid(format!(
                    "{what}: HTTP {status}: {}",
                    String::from_utf8_lossy(&bytes)
                        .chars()
                        .take(200)
                        .collect::<String>()
                )));
            }
            _ => {
                return Err(CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!("{what}: HTTP {status}; Keystone is failing, trying again"),
                ));
            }
        }
        let token = token.filter(|t| !t.is_empty()).ok_or_else(|| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("{what}: HTTP {status} without an X-Subject-Token header"),
            )
        })?;
        let reply: TokenReply = serde_json::from_slice(&bytes).map_err(|e| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("{what}: a reply that is not a Keystone token ({e})"),
            )
        })?;
        let network_url = self.network_endpoint(&reply.token.catalog)?;
        // The lifetime is told by Keystone's two clocks, not by ours against its own.
        let lifetime = match (
            parse_time(&reply.token.expires_at),
            reply.token.issued_at.as_deref().and_then(parse_time),
        ) {
            (Some(end), Some(start)) if end > start => Duration::from_secs((end - start) as u64),
            _ => {
                return Err(CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!(
                        "{what}: the token's expires_at {:?} or issued_at is not an ISO 8601 time",
                        reply.token.expires_at
                    ),
                ));
            }
        };
        // A short-lived token is still used for half its life rather than re-issued
        // before every request.
        let keep = lifetime.checked_sub(REFRESH_BEFORE).unwrap_or(lifetime / 2);
        Ok(Cached {
            token,
            refresh_at: Instant::now() + keep,
            network_url,
        })
    }

    fn network_endpoint(&self, catalog: &[CatalogEntry]) -> Result<String, CloudError> {
        let endpoints = catalog
            .iter()
            .filter(|e| e.kind == "network")
            .flat_map(|e| e.endpoints.iter())
            .filter(|e| e.interface == self.interface || e.interface.is_empty());
        let mut found = None;
        for e in endpoints {
            let region = e.region_id.as_deref().or(e.region.as_deref());
            match (&self.region, region) {
                (Some(want), Some(have)) if want == have => {
                    found = Some(e.url.clone());
                    break;
                }
                (None, _) => {
                    found = Some(e.url.clone());
                    break;
                }
                _ => {}
            }
        }
        found
            .map(|u| u.trim_end_matches('/').to_string())
            .ok_or_else(|| {
                CloudError::invalid(format!(
                    "openstack: the service catalog has no {} network endpoint{}; set \
                     [Global] region to one the catalog names, os-endpoint-type to an \
                     interface it has, or [Route] network-endpoint",
                    self.interface,
                    self.region
                        .as_deref()
                        .map(|r| format!(" in region {r}"))
                        .unwrap_or_default()
                ))
            })
    }
}

/// Keystone's v3 URL for an `auth-url`: as it is when it names a version, else found
/// in the version document Keystone serves at that URL (as gophercloud discovers it):
/// the `self` link of the v3 version.
pub(super) fn discover(agent: &ureq::Agent, auth_url: &str) -> Result<String, CloudError> {
    let url = auth_url.trim_end_matches('/');
    let last = url.rsplit('/').next().unwrap_or_default();
    if last.starts_with('v') && last[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Ok(url.to_string());
    }
    let what = format!("openstack: GET {url}/ (Keystone's version document)");
    Meter::request();
    let mut response = agent
        .get(&format!("{url}/"))
        .header("Accept", "application/json")
        .call()
        .map_err(|e| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("{what}: no reply ({e})"),
            )
        })?;
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_to_vec()
        .map_err(|e| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!("{what}: {e}"),
            )
        })?;
    if status >= 500 {
        return Err(CloudError::new(
            CloudErrorKind::Retry { after: None },
            format!("{what}: HTTP {status}; Keystone is failing, trying again"),
        ));
    }
    // Keystone answers 300 Multiple Choices with {"versions": {"values": [...]}} and a
    // Location of its v3, which the agent follows: {"version": {...}} then.
    let document: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let versions = &document["versions"];
    let mut values = versions["values"]
        .as_array()
        .or_else(|| versions.as_array())
        .cloned()
        .unwrap_or_default();
    if document["version"].is_object() {
        values.push(document["version"].clone());
    }
    let v3 = values
        .iter()
        .filter(|v| v["id"].as_str().is_some_and(|id| id.starts_with("v3")))
        .find_map(|v| {
            v["links"].as_array()?.iter().find(|l| l["rel"] == "self")?["href"]
                .as_str()
                .map(|h| h.trim_end_matches('/').to_string())
        });
    // Keystone builds the href from its own idea of its address (public_endpoint):
    // behind a TLS proxy that may be http:// or an inner host. The password is sent
    // where the operator pointed, so only the href's path is taken.
    let v3 = v3.map(|href| format!("{}{}", origin(url), path_of(&href)));
    v3.ok_or_else(|| {
        CloudError::invalid(format!(
            "{what}: HTTP {status} without a v3 version; set [Global] auth-url to Keystone's v3 \
             URL (e.g. https://keystone.example:5000/v3)"
        ))
    })
}

/// Seconds since 1970 of `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00)`, Keystone's form.
pub(super) fn parse_time(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time
        .trim_end_matches('Z')
        .trim_end_matches("+00:00")
        .split('.')
        .next()?;
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// The path of a URL (from its first `/` after the host), empty if none.
fn path_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[after_scheme + i..],
        None => "",
    }
}

/// The `password` method's user: by ID, or by name in its domain.
fn password_user(user: &UserRef, password: &crate::secret::Secret) -> serde_json::Value {
    match user {
        UserRef::Id(id) => json!({"id": id, "password": password.expose()}),
        UserRef::Name { name, domain } => json!({
            "name": name,
            "domain": { domain.0: &domain.1 },
            "password": password.expose()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards where the password goes after version discovery: to the host and scheme
    /// the operator configured, whatever Keystone's document says of itself.
    #[test]
    fn a_discovered_v3_keeps_the_configured_scheme_and_host() {
        let configured = "https://keystone.example:5000";
        let href = "http://10.0.0.5:5000/identity/v3";
        assert_eq!(
            format!("{}{}", origin(configured), path_of(href)),
            "https://keystone.example:5000/identity/v3"
        );
        assert_eq!(origin("https://k:5000/a/b"), "https://k:5000");
        assert_eq!(path_of("https://k:5000"), "");
    }

    #[test]
    fn os_endpoint_type_chooses_the_catalog_interface_of_the_network_endpoint() {
        let catalog: Vec<CatalogEntry> = serde_json::from_value(json!([
            {"type": "network", "endpoints": [
                {"interface": "public", "region_id": "R1", "url": "https://public:9696/"},
                {"interface": "internal", "region_id": "R1", "url": "http://internal:9696"},
                {"interface": "internal", "region_id": "R2", "url": "http://other:9696"}]}
        ]))
        .expect("a catalog");
        let keystone = |interface: &str| {
            let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
            Keystone::new(
                agent,
                "http://ks/v3",
                Some("R1".into()),
                interface.into(),
                Credentials::ApplicationCredential {
                    id: "a".into(),
                    secret: Secret::new("s"),
                },
            )
        };
        let url = |interface: &str| keystone(interface).network_endpoint(&catalog);
        assert_eq!(url("public").ok().as_deref(), Some("https://public:9696"));
        assert_eq!(
            url("internal").ok().as_deref(),
            Some("http://internal:9696")
        );
        let e = url("admin").expect_err("no admin endpoint");
        assert!(
            e.message.contains("no admin network endpoint in region R1"),
            "{e:?}"
        );
    }

    #[test]
    fn keystone_times_are_read_with_or_without_a_fraction() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_time("2026-12-03T08:00:00.000000Z"),
            Some(1_796_284_800)
        );
        assert_eq!(
            parse_time("2026-12-03T09:00:00+00:00")
                .zip(parse_time("2026-12-03T08:00:00Z"))
                .map(|(a, b)| a - b),
            Some(3600)
        );
        assert_eq!(parse_time("tomorrow"), None);
        assert_eq!(parse_time("2026-13-03T08:00:00Z"), None);
    }
}
