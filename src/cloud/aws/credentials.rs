//! Where the AWS provider gets its identity and region: the standard environment
//! variables, the shared credentials and config files, and the instance metadata
//! service (IMDSv2), in that order, like the AWS SDKs.
//!
//! Every input comes through [`AwsEnv`], so tests pass variables, a home directory and
//! a clock explicitly instead of mutating the process environment. Secrets live only
//! in [`Credentials`], whose `Debug` output redacts them; nothing here logs a secret,
//! and error messages name variables, files and URLs, never their secret values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::sigv4::parse_rfc3339_utc;
use crate::provider::{CloudError, CloudErrorKind};

/// A source of wall-clock time (signing dates, credential expiry).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The environment the provider reads: variables, the home directory, the clock.
#[derive(Clone)]
pub struct AwsEnv {
    vars: BTreeMap<String, String>,
    home: Option<PathBuf>,
    clock: Clock,
}

/// The variables read from the process by [`AwsEnv::from_process`].
pub const VARIABLES: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_SERVICE_QUOTAS",
    "AWS_EC2_METADATA_DISABLED",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
    "AWS_CA_BUNDLE",
];

impl AwsEnv {
    /// An empty environment with the real clock and no home directory.
    pub fn new() -> AwsEnv {
        AwsEnv {
            vars: BTreeMap::new(),
            home: None,
            clock: Arc::new(SystemTime::now),
        }
    }

    /// The process environment: the [`VARIABLES`] and `HOME`.
    pub fn from_process() -> AwsEnv {
        let mut env = AwsEnv::new();
        for name in VARIABLES {
            if let Ok(value) = std::env::var(name) {
                env.vars.insert(name.to_string(), value);
            }
        }
        env.home = std::env::var_os("HOME").map(PathBuf::from);
        env
    }

    pub fn with_var(mut self, name: &str, value: &str) -> AwsEnv {
        self.vars.insert(name.to_string(), value.to_string());
        self
    }

    pub fn with_home(mut self, home: impl Into<PathBuf>) -> AwsEnv {
        self.home = Some(home.into());
        self
    }

    pub fn with_clock(mut self, clock: Clock) -> AwsEnv {
        self.clock = clock;
        self
    }

    /// A variable's value; empty values count as unset, as in the SDKs.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    pub fn now(&self) -> SystemTime {
        (self.clock)()
    }

    pub fn clock(&self) -> Clock {
        self.clock.clone()
    }

    fn home_file(&self, var: &str, relative: &str) -> Option<PathBuf> {
        match self.var(var) {
            Some(path) => Some(PathBuf::from(path)),
            None => self.home.as_ref().map(|h| h.join(relative)),
        }
    }

    fn profile(&self) -> &str {
        self.var("AWS_PROFILE").unwrap_or("default")
    }
}

impl Default for AwsEnv {
    fn default() -> AwsEnv {
        AwsEnv::new()
    }
}

impl fmt::Debug for AwsEnv {
    /// Names only: values may be secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsEnv")
            .field("vars_set", &self.vars.keys().collect::<Vec<_>>())
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

/// An access key pair, possibly temporary.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: Option<String>,
    expires: Option<SystemTime>,
}

impl Credentials {
    pub fn new(access_key_id: &str, secret_access_key: &str) -> Credentials {
        Credentials {
            access_key_id: access_key_id.to_string(),
            secret_access_key: secret_access_key.to_string(),
            session_token: None,
            expires: None,
        }
    }

    /// Temporary credentials carry a session token, sent as `X-Amz-Security-Token`.
    pub fn with_session_token(mut self, token: &str) -> Credentials {
        self.session_token = Some(token.to_string());
        self
    }

    pub fn with_expiry(mut self, expires: SystemTime) -> Credentials {
        self.expires = Some(expires);
        self
    }

    pub fn access_key_id(&self) -> &str {
        &self.access_key_id
    }

    pub fn secret_access_key(&self) -> &str {
        &self.secret_access_key
    }

    pub fn session_token(&self) -> Option<&str> {
        self.session_token.as_deref()
    }

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

// --- the chain ------------------------------------------------------------------------

/// Where the signing credentials come from, decided once at start.
#[derive(Debug)]
pub enum CredentialSource {
    /// Long-lived or session credentials from the environment or a profile.
    Static {
        credentials: Credentials,
        /// For messages: `environment variables AWS_ACCESS_KEY_ID/...` or the profile
        /// and file.
        origin: String,
    },
    /// The instance role, through IMDSv2, refreshed before expiry.
    Instance(InstanceRole),
}

impl CredentialSource {
    /// Walks the chain: environment variables, then the shared credentials file's
    /// profile, then the instance role (unless `AWS_EC2_METADATA_DISABLED=true`).
    pub fn resolve(env: &AwsEnv, imds: Option<Imds>) -> Result<CredentialSource, CloudError> {
        if let Some(source) = from_env_vars(env)? {
            return Ok(source);
        }
        if let Some(source) = from_credentials_file(env)? {
            return Ok(source);
        }
        match imds {
            Some(imds) => Ok(CredentialSource::Instance(InstanceRole::new(imds))),
            None => Err(CloudError::invalid(format!(
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                 put profile {:?} in {}, or run on EC2 with an instance role (the instance \
                 metadata service is disabled by AWS_EC2_METADATA_DISABLED)",
                env.profile(),
                display_path(env.home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"))
            ))),
        }
    }

    /// Credentials valid now (refreshing the instance role's if due).
    pub fn current(&self, now: SystemTime) -> Result<Credentials, CloudError> {
        match self {
            CredentialSource::Static { credentials, .. } => Ok(credentials.clone()),
            CredentialSource::Instance(role) => role.current(now),
        }
    }

    /// Where the credentials come from, for error messages.
    pub fn origin(&self) -> String {
        match self {
            CredentialSource::Static { origin, .. } => origin.clone(),
            CredentialSource::Instance(role) => {
                format!("the instance role (IMDS at {})", role.imds.endpoint)
            }
        }
    }
}

fn from_env_vars(env: &AwsEnv) -> Result<Option<CredentialSource>, CloudError> {
    let (id, secret) = (
        env.var("AWS_ACCESS_KEY_ID"),
        env.var("AWS_SECRET_ACCESS_KEY"),
    );
    let credentials = match (id, secret) {
        (None, None) => return Ok(None),
        (Some(id), Some(secret)) => Credentials::new(id, secret),
        (Some(_), None) => {
            return Err(CloudError::invalid(
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both, or neither",
            ));
        }
        (None, Some(_)) => {
            return Err(CloudError::invalid(
                "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not: set both, or neither",
            ));
        }
    };
    let credentials = match env.var("AWS_SESSION_TOKEN") {
        Some(token) => credentials.with_session_token(token),
        None => credentials,
    };
    Ok(Some(CredentialSource::Static {
        credentials,
        origin: "the environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY".into(),
    }))
}

fn from_credentials_file(env: &AwsEnv) -> Result<Option<CredentialSource>, CloudError> {
    let Some(path) = env.home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials") else {
        return Ok(None);
    };
    let profile = env.profile();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if env.var("AWS_SHARED_CREDENTIALS_FILE").is_some() {
                return Err(CloudError::invalid(format!(
                    "AWS_SHARED_CREDENTIALS_FILE names {}, which does not exist",
                    path.display()
                )));
            }
            return Ok(None);
        }
        Err(e) => {
            return Err(CloudError::invalid(format!(
                "cannot read the AWS credentials file {}: {e}",
                path.display()
            )));
        }
    };
    let sections = parse_ini(&text);
    let Some(section) = sections.get(profile) else {
        if env.var("AWS_PROFILE").is_some() {
            return Err(CloudError::invalid(format!(
                "AWS_PROFILE is {profile:?} but {} has no [{profile}] section",
                path.display()
            )));
        }
        return Ok(None);
    };
    let origin = format!("profile {profile:?} in {}", path.display());
    let id = section.get("aws_access_key_id").filter(|v| !v.is_empty());
    let secret = section
        .get("aws_secret_access_key")
        .filter(|v| !v.is_empty());
    let (Some(id), Some(secret)) = (id, secret) else {
        return Err(CloudError::invalid(format!(
            "{origin} needs both aws_access_key_id and aws_secret_access_key"
        )));
    };
    let mut credentials = Credentials::new(id, secret);
    if let Some(token) = section.get("aws_session_token").filter(|v| !v.is_empty()) {
        credentials = credentials.with_session_token(token);
    }
    Ok(Some(CredentialSource::Static {
        credentials,
        origin,
    }))
}

/// The region: the configured one, `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's
/// `region` in the shared config file, and last the instance's own region from IMDS.
pub fn resolve_region(
    configured: Option<&str>,
    env: &AwsEnv,
    imds: Option<&Imds>,
) -> Result<String, CloudError> {
    let from_env = configured
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .or_else(|| env.var("AWS_REGION"))
        .or_else(|| env.var("AWS_DEFAULT_REGION"));
    if let Some(region) = from_env {
        return Ok(region.to_string());
    }
    if let Some(region) = region_from_config_file(env) {
        return Ok(region);
    }
    let no_region = "no AWS region: set the provider's region, AWS_REGION or AWS_DEFAULT_REGION";
    match imds {
        Some(imds) => imds.region().map_err(|e| {
            CloudError::invalid(format!(
                "{no_region} (asking the instance metadata service failed: {e})"
            ))
        }),
        None => Err(CloudError::invalid(no_region)),
    }
}

fn region_from_config_file(env: &AwsEnv) -> Option<String> {
    let path = env.home_file("AWS_CONFIG_FILE", ".aws/config")?;
    let text = std::fs::read_to_string(path).ok()?;
    let profile = env.profile();
    let section = if profile == "default" {
        "default".to_string()
    } else {
        format!("profile {profile}")
    };
    parse_ini(&text)
        .get(&section)?
        .get("region")
        .filter(|r| !r.is_empty())
        .cloned()
}

/// The AWS flavour of INI: `[section]`, `key = value`, `#`/`;` comments. Keys are
/// case-sensitive like the SDKs'; indented lines (nested values) are ignored.
fn parse_ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut sections: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
        } else if let (Some(section), Some((key, value))) = (&current, line.split_once('='))
            && let Some(entries) = sections.get_mut(section)
        {
            entries.insert(key.trim().to_string(), value.trim().to_string());
        }
    }
    sections
}

fn display_path(path: Option<PathBuf>) -> String {
    path.map(|p| p.display().to_string())
        .unwrap_or_else(|| "~/.aws/credentials (HOME is not set)".into())
}

// --- IMDSv2 -----------------------------------------------------------------------------

/// The default instance metadata endpoint.
pub const IMDS_ENDPOINT: &str = "http://169.254.169.254";
/// How long an IMDSv2 session token lives (the maximum, 6 h).
const IMDS_TOKEN_TTL: Duration = Duration::from_secs(21_600);
/// Credentials are refreshed this long before they expire (IMDS offers new ones at
/// least five minutes before the old ones expire).
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(300);
/// If IMDS still hands out credentials close to expiry, ask again only this often.
pub const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// A client of the instance metadata service, version 2 (session tokens).
pub struct Imds {
    agent: ureq::Agent,
    endpoint: String,
    clock: Clock,
    token: Mutex<Option<(String, SystemTime)>>,
}

impl fmt::Debug for Imds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Imds")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Imds {
    /// The client for `env`: `None` when `AWS_EC2_METADATA_DISABLED=true`. The
    /// endpoint is `configured`, else `AWS_EC2_METADATA_SERVICE_ENDPOINT`, else the
    /// link-local default.
    pub fn from_env(env: &AwsEnv, configured: Option<&str>) -> Option<Imds> {
        if env
            .var("AWS_EC2_METADATA_DISABLED")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return None;
        }
        let endpoint = configured
            .or_else(|| env.var("AWS_EC2_METADATA_SERVICE_ENDPOINT"))
            .unwrap_or(IMDS_ENDPOINT);
        Some(Imds::new(endpoint, env.clock()))
    }

    pub fn new(endpoint: &str, clock: Clock) -> Imds {
        // Off EC2 the link-local address does not answer; fail fast, not after 30 s.
        let agent = crate::http::metadata_config()
            .timeout_connect(Some(Duration::from_secs(1)))
            .timeout_global(Some(Duration::from_secs(3)))
            .http_status_as_error(false)
            .max_redirects(0)
            // The metadata service is link-local: never through an HTTP(S)_PROXY.
            .proxy(None)
            .build()
            .new_agent();
        Imds {
            agent,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            clock,
            token: Mutex::new(None),
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn session_token(&self, renew: bool) -> Result<String, String> {
        let now = (self.clock)();
        let mut cached = crate::sync::lock(&self.token);
        if let Some((token, expires)) = cached.as_ref()
            && !renew
            && now + Duration::from_secs(60) < *expires
        {
            return Ok(token.clone());
        }
        let url = format!("{}/latest/api/token", self.endpoint);
        let mut response = self
            .agent
            .put(&url)
            .header(
                "X-aws-ec2-metadata-token-ttl-seconds",
                IMDS_TOKEN_TTL.as_secs().to_string(),
            )
            .send_empty()
            .map_err(|e| format!("PUT {url}: {e}"))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(format!("PUT {url} answered HTTP {status}"));
        }
        let token = response
            .body_mut()
            .read_to_string()
            .map_err(|e| format!("PUT {url}: reading the token: {e}"))?
            .trim()
            .to_string();
        *cached = Some((token.clone(), now + IMDS_TOKEN_TTL));
        Ok(token)
    }

    /// GETs a metadata path with a session token, renewing the token once if IMDS
    /// no longer accepts it.
    pub fn get(&self, path: &str) -> Result<String, String> {
        let url = format!("{}{path}", self.endpoint);
        for renew in [false, true] {
            let token = self.session_token(renew)?;
            let mut response = self
                .agent
                .get(&url)
                .header("X-aws-ec2-metadata-token", &token)
                .call()
                .map_err(|e| format!("GET {url}: {e}"))?;
            let status = response.status().as_u16();
            if status == 401 && !renew {
                continue;
            }
            if status != 200 {
                return Err(format!("GET {url} answered HTTP {status}"));
            }
            return response
                .body_mut()
                .read_to_string()
                .map_err(|e| format!("GET {url}: {e}"));
        }
        Err(format!("GET {url}: the metadata token was refused twice"))
    }

    /// The instance's region.
    pub fn region(&self) -> Result<String, String> {
        let region = self.get("/latest/meta-data/placement/region")?;
        let region = region.trim();
        if region.is_empty() {
            return Err("the metadata service returned an empty region".into());
        }
        Ok(region.to_string())
    }

    /// The instance role's current credentials.
    pub fn role_credentials(&self) -> Result<Credentials, String> {
        const BASE: &str = "/latest/meta-data/iam/security-credentials/";
        let roles = self.get(BASE)?;
        let role = roles
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .ok_or_else(|| {
                format!(
                    "the instance has no IAM role ({}{BASE} is empty): attach an instance profile",
                    self.endpoint
                )
            })?;
        let body = self.get(&format!("{BASE}{role}"))?;
        parse_role_credentials(&body).map_err(|e| format!("role {role}: {e}"))
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RoleCredentials {
    #[serde(default)]
    code: Option<String>,
    access_key_id: String,
    secret_access_key: String,
    token: String,
    expiration: String,
}

fn parse_role_credentials(body: &str) -> Result<Credentials, String> {
    let parsed: RoleCredentials = serde_json::from_str(body)
        .map_err(|e| format!("the credentials document is not the expected JSON: {e}"))?;
    if let Some(code) = parsed.code.as_deref().filter(|c| *c != "Success") {
        return Err(format!("the metadata service reports code {code:?}"));
    }
    let expires = parse_rfc3339_utc(&parsed.expiration)
        .ok_or_else(|| format!("unreadable Expiration {:?}", parsed.expiration))?;
    Ok(
        Credentials::new(&parsed.access_key_id, &parsed.secret_access_key)
            .with_session_token(&parsed.token)
            .with_expiry(expires),
    )
}

/// The instance role's credentials, fetched on first use and refreshed before expiry.
/// Threads that need credentials during a refresh wait for it rather than all asking
/// IMDS at once.
pub struct InstanceRole {
    imds: Imds,
    cached: Mutex<Option<Fetched>>,
}

struct Fetched {
    credentials: Credentials,
    refresh_at: SystemTime,
}

impl fmt::Debug for InstanceRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceRole")
            .field("imds", &self.imds)
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

impl InstanceRole {
    pub fn new(imds: Imds) -> InstanceRole {
        InstanceRole {
            imds,
            cached: Mutex::new(None),
        }
    }

    pub fn current(&self, now: SystemTime) -> Result<Credentials, CloudError> {
        let mut cached = crate::sync::lock(&self.cached);
        if let Some(f) = cached.as_ref()
            && now < f.refresh_at
        {
            return Ok(f.credentials.clone());
        }
        match self.imds.role_credentials() {
            Ok(credentials) => {
                let refresh_at = refresh_at(now, credentials.expires())
                    .unwrap_or(now + Duration::from_secs(3600));
                log::debug!(
                    "fetched instance role credentials {} from {}",
                    credentials.key_hint(),
                    self.imds.endpoint
                );
                *cached = Some(Fetched {
                    credentials: credentials.clone(),
                    refresh_at,
                });
                Ok(credentials)
            }
            Err(e) => match cached.as_ref() {
                // Still valid: keep using them and try again on the next request.
                Some(f) if f.credentials.expires().is_none_or(|exp| now < exp) => {
                    log::warn!("refreshing the instance role credentials failed: {e}");
                    Ok(f.credentials.clone())
                }
                _ => Err(CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!(
                        "no AWS credentials from the instance role: {e}; set \
                         AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile if this is not \
                         an EC2 instance with a role"
                    ),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn environment_variables_come_first_and_carry_the_session_token() {
        let env = AwsEnv::new()
            .with_var("AWS_ACCESS_KEY_ID", "AKIDENV")
            .with_var("AWS_SECRET_ACCESS_KEY", "secret-env")
            .with_var("AWS_SESSION_TOKEN", "token-env")
            .with_var("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/file");
        let source = CredentialSource::resolve(&env, None).expect("resolves");
        let creds = source.current(UNIX_EPOCH).expect("static");
        assert_eq!(creds.access_key_id(), "AKIDENV");
        assert_eq!(creds.secret_access_key(), "secret-env");
        assert_eq!(creds.session_token(), Some("token-env"));
        assert!(source.origin().contains("AWS_ACCESS_KEY_ID"));
    }

    #[test]
    fn half_set_environment_credentials_are_an_error_naming_the_missing_variable() {
        let env = AwsEnv::new().with_var("AWS_ACCESS_KEY_ID", "AKIDENV");
        let err = CredentialSource::resolve(&env, None).expect_err("half set");
        assert_eq!(err.kind, CloudErrorKind::Invalid);
        assert!(
            err.message.contains("AWS_SECRET_ACCESS_KEY"),
            "{}",
            err.message
        );
    }

    fn temp_file(name: &str, text: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::write(&path, text).expect("write temp file");
        path
    }

    #[test]
    fn a_named_profile_missing_from_the_file_is_an_error_naming_both() {
        let path = temp_file(
            "aws-creds-missing-profile",
            "[default]\naws_access_key_id=A\n",
        );
        let env = AwsEnv::new()
            .with_var("AWS_SHARED_CREDENTIALS_FILE", &path.display().to_string())
            .with_var("AWS_PROFILE", "prod");
        let err = CredentialSource::resolve(&env, None).expect_err("no [prod]");
        assert!(err.message.contains("[prod]"), "{}", err.message);
        assert!(
            err.message.contains(&path.display().to_string()),
            "{}",
            err.message
        );
        // The default profile exists but lacks its secret.
        let env =
            AwsEnv::new().with_var("AWS_SHARED_CREDENTIALS_FILE", &path.display().to_string());
        let err = CredentialSource::resolve(&env, None).expect_err("no secret");
        assert!(
            err.message.contains("aws_secret_access_key"),
            "{}",
            err.message
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_credentials_file_named_by_the_variable_must_exist() {
        let env = AwsEnv::new().with_var(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/aws/credentials",
        );
        let err = CredentialSource::resolve(&env, None).expect_err("missing file");
        assert!(
            err.message.contains("/nonexistent/aws/credentials"),
            "{}",
            err.message
        );
        // Without the variable, a missing ~/.aws/credentials just moves on (here to
        // "no credentials", the metadata service being disabled).
        let env = AwsEnv::new().with_home("/nonexistent-home");
        let err = CredentialSource::resolve(&env, None).expect_err("nothing at all");
        assert!(
            err.message.contains("no AWS credentials"),
            "{}",
            err.message
        );
    }

    #[test]
    fn debug_output_never_shows_secrets() {
        let creds = Credentials::new("AKIDEXAMPLE1234", "very-secret-key")
            .with_session_token("very-secret-token");
        let text = format!("{creds:?}");
        assert!(!text.contains("very-secret"), "{text}");
        assert!(text.contains("AKID…1234"), "{text}");
        let env = AwsEnv::new().with_var("AWS_SECRET_ACCESS_KEY", "very-secret-key");
        let text = format!("{env:?}");
        assert!(!text.contains("very-secret"), "{text}");
        let source = CredentialSource::Static {
            credentials: creds,
            origin: "test".into(),
        };
        assert!(!format!("{source:?}").contains("very-secret"));
    }

    #[test]
    fn ini_sections_keys_and_comments() {
        let parsed = parse_ini(
            "# comment\n[default]\naws_access_key_id = A\n; other\n[profile  dev]\nregion=eu-west-1\n\
             s3 =\n  max_concurrent_requests = 20\n",
        );
        assert_eq!(parsed["default"]["aws_access_key_id"], "A");
        assert_eq!(parsed["profile dev"]["region"], "eu-west-1");
        assert!(!parsed["profile dev"].contains_key("max_concurrent_requests"));
    }

    #[test]
    fn refresh_is_due_five_minutes_before_expiry_but_not_in_a_loop() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        assert_eq!(
            refresh_at(t0, Some(t0 + hour)),
            Some(t0 + hour - REFRESH_BEFORE_EXPIRY)
        );
        // IMDS handed out credentials that expire in two minutes: ask again in one.
        let two_min = Duration::from_secs(120);
        assert_eq!(
            refresh_at(t0, Some(t0 + two_min)),
            Some(t0 + MIN_REFRESH_INTERVAL)
        );
        // ...but never later than the expiry itself.
        let thirty_s = Duration::from_secs(30);
        assert_eq!(refresh_at(t0, Some(t0 + thirty_s)), Some(t0 + thirty_s));
        assert_eq!(refresh_at(t0, None), None);
    }

    #[test]
    fn role_credentials_document_is_parsed_with_its_expiry() {
        let body = r#"{"Code":"Success","LastUpdated":"2026-11-30T20:00:00Z","Type":"AWS-HMAC",
            "AccessKeyId":"ASIAROLE","SecretAccessKey":"s","Token":"t",
            "Expiration":"2026-11-30T21:00:00Z"}"#;
        let creds = parse_role_credentials(body).expect("parses");
        assert_eq!(creds.access_key_id(), "ASIAROLE");
        assert_eq!(creds.session_token(), Some("t"));
        assert_eq!(creds.expires(), parse_rfc3339_utc("2026-11-30T21:00:00Z"));
        let failed = r#"{"Code":"AssumeRoleUnauthorizedAccess","AccessKeyId":"","SecretAccessKey":"",
            "Token":"","Expiration":"2026-11-30T21:00:00Z"}"#;
        assert!(parse_role_credentials(failed).is_err());
        assert!(parse_role_credentials("<html>").is_err());
    }

    /// Invariant 8 for the instance metadata service's credentials document.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz::{check, config, text};
        use crate::fuzz_seed;

        static DOCUMENTS: &[&[u8]] = &[fuzz_seed!("aws-role-credentials.json")];

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn role_credentials(input in text(DOCUMENTS)) {
                check("the role credentials parser", move || {
                    let _ = parse_role_credentials(&input).map(|_| ());
                });
            }
        }
    }
}
