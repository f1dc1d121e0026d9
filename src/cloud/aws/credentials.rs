//! Where the AWS provider gets its identity and region: the credential chain of the
//! AWS SDKs, in the Go SDK's order (cloud-provider-aws is built on it): environment
//! keys, web identity (IRSA), the shared config and credentials files' profile,
//! container credentials (ECS, EKS Pod Identity), the instance role (IMDSv2); then
//! the cloud config's `RoleARN` on top. STS lives in `sts.rs`, profiles in
//! `profile.rs`, the container endpoint in `container.rs`, `credential_process` in
//! `process.rs`.
//!
//! Every input comes through [`AwsEnv`], so tests pass variables, a home directory and
//! a clock explicitly instead of mutating the process environment. Secrets live only
//! in [`Credentials`] (as `Secret`s, whose `Debug` output is redacted); nothing here
//! logs a secret, and error messages name variables, files and URLs, never their
//! secret values.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::Deserialize;

use super::sigv4::parse_rfc3339_utc;
use crate::provider::{CloudError, CloudErrorKind};

// The keys and their refresh live in a leaf both signing providers share; their
// paths here stay for the AWS modules, the tests and embedders.
pub(crate) use crate::credentials::read_bounded;
pub use crate::credentials::{
    Clock, Credentials, Fetch, MIN_REFRESH_INTERVAL, REFRESH_BEFORE_EXPIRY, Refreshing,
    failure_pause, refresh_at,
};

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
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_SESSION_NAME",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_SERVICE_QUOTAS",
    "AWS_ENDPOINT_URL_STS",
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

    pub(super) fn home_file(&self, var: &str, relative: &str) -> Option<PathBuf> {
        match self.var(var) {
            Some(path) => Some(PathBuf::from(path)),
            None => self.home.as_ref().map(|h| h.join(relative)),
        }
    }

    pub(super) fn profile(&self) -> &str {
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
// --- the chain ------------------------------------------------------------------------

/// What the chain needs besides the environment.
#[derive(Clone, Debug)]
pub struct ChainSettings {
    /// The region whose STS endpoint assumes roles (`https://sts.<region>.amazonaws.com/`
    /// unless `AWS_ENDPOINT_URL_STS` or `AWS_ENDPOINT_URL` names another).
    pub region: String,
    /// A role assumed on top of whatever the chain found, with STS `AssumeRole` signed
    /// by the chain's credentials: the CCM cloud config's `RoleARN`, as
    /// cloud-provider-aws assumes it. Default: none.
    pub role_arn: Option<String>,
    /// How long a profile's `credential_process` may run (default 60 s, the Go SDK's).
    pub process_timeout: Duration,
    /// Timeout of one STS or container-endpoint request (default 10 s).
    pub timeout: Duration,
}

impl ChainSettings {
    pub fn new(region: &str) -> ChainSettings {
        ChainSettings {
            region: region.to_string(),
            role_arn: None,
            process_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
        }
    }

    pub fn with_role_arn(mut self, role_arn: Option<&str>) -> ChainSettings {
        self.role_arn = role_arn
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string);
        self
    }
}

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
    /// Temporary credentials (STS, a container endpoint, a process, the instance
    /// role), fetched on first use and refreshed before they expire.
    Temporary(Refreshing),
}

impl CredentialSource {
    /// Walks the chain in the Go SDK's order (which cloud-provider-aws uses):
    /// environment keys; web identity (`AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`);
    /// the profile of the shared config and credentials files (keys, `role_arn` with
    /// `source_profile` or `credential_source`, `web_identity_token_file`,
    /// `credential_process`); container credentials (ECS, EKS Pod Identity); the
    /// instance role (unless `AWS_EC2_METADATA_DISABLED=true`). Then, when
    /// `settings.role_arn` is set, that role is assumed on top.
    pub fn resolve(
        env: &AwsEnv,
        imds: Option<Imds>,
        settings: &ChainSettings,
    ) -> Result<CredentialSource, CloudError> {
        let mut resolver = Resolver {
            env,
            imds,
            settings,
        };
        let base = resolver.chain()?;
        match &settings.role_arn {
            Some(role_arn) => resolver.assume_role(
                base,
                super::sts::AssumeRoleSettings::new(role_arn, "RoleARN"),
            ),
            None => Ok(base),
        }
    }

    /// Credentials valid now (refreshing temporary ones if due).
    pub fn current(&self, now: SystemTime) -> Result<Credentials, CloudError> {
        match self {
            CredentialSource::Static { credentials, .. } => Ok(credentials.clone()),
            CredentialSource::Temporary(refreshing) => refreshing.current(now),
        }
    }

    /// Where the credentials come from, for the start-up log and error messages.
    pub fn origin(&self) -> String {
        match self {
            CredentialSource::Static { origin, .. } => origin.clone(),
            CredentialSource::Temporary(refreshing) => refreshing.origin(),
        }
    }
}

/// The chain's inputs while it is walked; the instance metadata client goes to the
/// one source that uses it.
pub(super) struct Resolver<'a> {
    pub(super) env: &'a AwsEnv,
    pub(super) imds: Option<Imds>,
    pub(super) settings: &'a ChainSettings,
}

impl Resolver<'_> {
    fn chain(&mut self) -> Result<CredentialSource, CloudError> {
        if let Some(source) = from_env_vars(self.env)? {
            return Ok(source);
        }
        if let Some(source) = self.web_identity_from_env()? {
            return Ok(source);
        }
        if let Some(source) = super::profile::resolve(self)? {
            return Ok(source);
        }
        if let Some(source) = self.container()? {
            return Ok(source);
        }
        match self.instance_role() {
            Some(source) => Ok(source),
            None => Err(CloudError::invalid(format!(
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                 AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE (IRSA), or put profile {:?} in \
                 {}, or AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity), or run on EC2 \
                 with an instance role (the instance metadata service is disabled by \
                 AWS_EC2_METADATA_DISABLED)",
                self.env.profile(),
                display_path(
                    self.env
                        .home_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials")
                )
            ))),
        }
    }

    fn web_identity_from_env(&self) -> Result<Option<CredentialSource>, CloudError> {
        let Some(token_file) = self.env.var("AWS_WEB_IDENTITY_TOKEN_FILE") else {
            return Ok(None);
        };
        let Some(role_arn) = self.env.var("AWS_ROLE_ARN") else {
            return Err(CloudError::invalid(
                "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not: set the role to \
                 assume (on EKS, annotate the ServiceAccount with eks.amazonaws.com/role-arn)",
            ));
        };
        self.web_identity(
            role_arn,
            PathBuf::from(token_file),
            self.env.var("AWS_ROLE_SESSION_NAME"),
        )
        .map(Some)
    }

    pub(super) fn web_identity(
        &self,
        role_arn: &str,
        token_file: PathBuf,
        session_name: Option<&str>,
    ) -> Result<CredentialSource, CloudError> {
        let fetch = super::sts::WebIdentity::new(
            self.env,
            self.settings,
            role_arn,
            token_file,
            session_name,
        )?;
        Ok(CredentialSource::Temporary(Refreshing::new(fetch)))
    }

    pub(super) fn assume_role(
        &self,
        source: CredentialSource,
        role: super::sts::AssumeRoleSettings,
    ) -> Result<CredentialSource, CloudError> {
        let fetch = super::sts::AssumeRole::new(self.env, self.settings, source, role)?;
        Ok(CredentialSource::Temporary(Refreshing::new(fetch)))
    }

    pub(super) fn container(&self) -> Result<Option<CredentialSource>, CloudError> {
        let Some(fetch) = super::container::Container::from_env(self.env, self.settings)? else {
            return Ok(None);
        };
        Ok(Some(CredentialSource::Temporary(Refreshing::new(fetch))))
    }

    pub(super) fn instance_role(&mut self) -> Option<CredentialSource> {
        let imds = self.imds.take()?;
        Some(CredentialSource::Temporary(Refreshing::new(InstanceRole {
            imds,
        })))
    }

    pub(super) fn environment_keys(&self) -> Result<Option<CredentialSource>, CloudError> {
        from_env_vars(self.env)
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
    profile_setting(env, "region")
}

/// A setting of the active profile in the shared config file (`[default]` or
/// `[profile NAME]`), if set and not empty.
fn profile_setting(env: &AwsEnv, key: &str) -> Option<String> {
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
        .get(key)
        .filter(|v| !v.is_empty())
        .cloned()
}

/// The `ca_bundle` of the active profile in the shared config file, as the AWS SDKs
/// read it: the CA file to trust besides the others when `AWS_CA_BUNDLE` is unset.
pub fn profile_ca_bundle(env: &AwsEnv) -> Option<PathBuf> {
    profile_setting(env, "ca_bundle").map(PathBuf::from)
}

/// The AWS flavour of INI: `[section]`, `key = value`, `#`/`;` comments. Keys are
/// case-sensitive like the SDKs'; indented lines (nested values) are ignored.
pub(super) fn parse_ini(text: &str) -> BTreeMap<String, BTreeMap<String, String>> {
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

/// The HTTP agent of the node-local credential endpoints (IMDS, the container
/// endpoint): connecting gives up after a second, since off EC2, ECS or EKS their
/// link-local addresses do not answer; never through an HTTP(S)_PROXY, which could
/// not reach them.
pub(super) fn local_agent(timeout: Duration) -> ureq::Agent {
    // The metadata and container endpoints are link-local or loopback: never through
    // an HTTP(S)_PROXY.
    crate::http::metadata_config()
        .timeout_connect(Some(timeout.min(Duration::from_secs(1))))
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .new_agent()
}

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
        Imds {
            // Off EC2 the link-local address does not answer; fail fast, not after 30 s.
            agent: local_agent(Duration::from_secs(3)),
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

/// The instance role's credentials, from IMDSv2.
pub struct InstanceRole {
    imds: Imds,
}

impl Fetch for InstanceRole {
    fn fetch(&self, _now: SystemTime) -> Result<Credentials, CloudError> {
        self.imds.role_credentials().map_err(|e| {
            CloudError::new(
                CloudErrorKind::Retry { after: None },
                format!(
                    "{e}; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, web identity or a \
                     profile if this is not an EC2 instance with a role"
                ),
            )
        })
    }

    fn origin(&self) -> String {
        format!("the instance role (IMDS at {})", self.imds.endpoint)
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
        let source = CredentialSource::resolve(&env, None, &ChainSettings::new("eu-west-1"))
            .expect("resolves");
        let creds = source.current(UNIX_EPOCH).expect("static");
        assert_eq!(creds.access_key_id(), "AKIDENV");
        assert_eq!(creds.secret_access_key(), "secret-env");
        assert_eq!(creds.session_token(), Some("token-env"));
        assert!(source.origin().contains("AWS_ACCESS_KEY_ID"));
    }

    #[test]
    fn half_set_environment_credentials_are_an_error_naming_the_missing_variable() {
        let env = AwsEnv::new().with_var("AWS_ACCESS_KEY_ID", "AKIDENV");
        let err = CredentialSource::resolve(&env, None, &ChainSettings::new("eu-west-1"))
            .expect_err("half set");
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
        let err = CredentialSource::resolve(&env, None, &ChainSettings::new("eu-west-1"))
            .expect_err("no [prod]");
        assert!(err.message.contains("[prod]"), "{}", err.message);
        assert!(
            err.message.contains(&path.display().to_string()),
            "{}",
            err.message
        );
        // The default profile exists but lacks its secret.
        let env =
            AwsEnv::new().with_var("AWS_SHARED_CREDENTIALS_FILE", &path.display().to_string());
        let err = CredentialSource::resolve(&env, None, &ChainSettings::new("eu-west-1"))
            .expect_err("no secret");
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
        let err = CredentialSource::resolve(&env, None, &ChainSettings::new("eu-west-1"))
            .expect_err("missing file");
        assert!(
            err.message.contains("/nonexistent/aws/credentials"),
            "{}",
            err.message
        );
        // Without the variable, a missing ~/.aws/credentials just moves on (here to
        // "no credentials", the metadata service being disabled).
        let env = AwsEnv::new().with_home("/nonexistent-home");
        let err = CredentialSource::resolve(&env, None, &ChainSettings::new("eu-west-1"))
            .expect_err("nothing at all");
        assert!(
            err.message.contains("no AWS credentials"),
            "{}",
            err.message
        );
    }

    fn origin_of(env: &AwsEnv, imds: bool) -> Result<String, String> {
        let imds = imds.then(|| Imds::new("http://127.0.0.1:9", env.clock()));
        CredentialSource::resolve(env, imds, &ChainSettings::new("eu-west-1"))
            .map(|s| s.origin())
            .map_err(|e| e.message)
    }

    /// The Go SDK's order, each source shadowing the ones after it; resolving sends
    /// nothing (temporary credentials are fetched on first use).
    #[test]
    fn the_chain_takes_env_keys_then_web_identity_then_profile_then_container_then_imds() {
        let dir = std::env::temp_dir().join(format!("aws-chain-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let credentials = dir.join("credentials");
        std::fs::write(
            &credentials,
            "[default]\naws_access_key_id=AKIDFILE\naws_secret_access_key=s\n",
        )
        .expect("write");
        let imds_only = AwsEnv::new().with_home("/nonexistent-home");
        let container = imds_only
            .clone()
            .with_var(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "http://169.254.170.23/v1/credentials",
            )
            .with_var(
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                "/var/run/pod-identity/token",
            );
        let profile = container.clone().with_var(
            "AWS_SHARED_CREDENTIALS_FILE",
            &credentials.display().to_string(),
        );
        let web_identity = profile
            .clone()
            .with_var("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/x")
            .with_var("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/secrets/eks/token");
        let keys = web_identity
            .clone()
            .with_var("AWS_ACCESS_KEY_ID", "AKIDENV")
            .with_var("AWS_SECRET_ACCESS_KEY", "s");
        let expect = |env: &AwsEnv, origin: &str| {
            let got = origin_of(env, true).expect("resolves");
            assert!(got.starts_with(origin), "expected {origin}…, got {got}");
        };
        expect(&keys, "the environment variables AWS_ACCESS_KEY_ID");
        expect(
            &web_identity,
            "web identity (role arn:aws:iam::123456789012:role/x, token file /var/run/secrets/eks/token)",
        );
        expect(&profile, "profile \"default\" in ");
        expect(
            &container,
            "container credentials (http://169.254.170.23/…, token file \
             /var/run/pod-identity/token)",
        );
        expect(&imds_only, "the instance role (IMDS at http://127.0.0.1:9)");
        let err = origin_of(&imds_only, false).expect_err("nothing left");
        assert!(err.contains("no AWS credentials"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn profile_roles_without_a_source_or_in_a_loop_and_a_token_file_without_a_role_are_refused() {
        let dir = std::env::temp_dir().join(format!("aws-chain-refusals-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let config = dir.join("config");
        std::fs::write(
            &config,
            "[profile lone]\nrole_arn=arn:aws:iam::1:role/r\n\
             [profile a]\nrole_arn=arn:aws:iam::1:role/a\nsource_profile=b\n\
             [profile b]\nrole_arn=arn:aws:iam::1:role/b\nsource_profile=a\n\
             [profile odd]\nrole_arn=arn:aws:iam::1:role/o\ncredential_source=Somewhere\n\
             [profile long]\nrole_arn=arn:aws:iam::1:role/l\ncredential_source=Environment\n\
             duration_seconds=99999\n",
        )
        .expect("write");
        let env = |profile: &str| {
            AwsEnv::new()
                .with_home("/nonexistent-home")
                .with_var("AWS_CONFIG_FILE", &config.display().to_string())
                .with_var("AWS_PROFILE", profile)
        };
        for (profile, expected) in [
            (
                "lone",
                "no source_profile, credential_source or web_identity_token_file",
            ),
            ("a", "loop: a -> b -> a"),
            (
                "odd",
                "\"Somewhere\" is not Environment, Ec2InstanceMetadata or EcsContainer",
            ),
            ("long", "duration_seconds \"99999\""),
            ("missing", "AWS_PROFILE is \"missing\""),
        ] {
            let err = origin_of(&env(profile), false).expect_err(profile);
            assert!(err.contains(expected), "{profile}: {err}");
        }
        let token_only = AwsEnv::new().with_var("AWS_WEB_IDENTITY_TOKEN_FILE", "/t");
        let err = origin_of(&token_only, false).expect_err("no role");
        assert!(err.contains("AWS_ROLE_ARN is not"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
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

    /// A source whose answers the test scripts, counting the fetches.
    struct Scripted {
        answers: Mutex<Vec<Result<Credentials, CloudError>>>,
        fetches: std::sync::Arc<std::sync::atomic::AtomicU32>,
    }

    impl Fetch for Scripted {
        fn fetch(&self, _now: SystemTime) -> Result<Credentials, CloudError> {
            self.fetches
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut answers = crate::sync::lock(&self.answers);
            assert!(!answers.is_empty(), "a fetch the test did not expect");
            answers.remove(0)
        }

        fn origin(&self) -> String {
            "the script".into()
        }
    }

    fn scripted(
        answers: Vec<Result<Credentials, CloudError>>,
    ) -> (Refreshing, std::sync::Arc<std::sync::atomic::AtomicU32>) {
        let fetches = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let source = Refreshing::new(Scripted {
            answers: Mutex::new(answers),
            fetches: fetches.clone(),
        });
        (source, fetches)
    }

    fn outage() -> CloudError {
        CloudError::new(CloudErrorKind::Retry { after: None }, "connection refused")
    }

    #[test]
    fn a_failed_refresh_keeps_the_valid_credentials_and_pauses_before_asking_again() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let s = Duration::from_secs;
        let first = Credentials::new("AKIDFIRST", "secret").with_expiry(t0 + s(3600));
        let second = Credentials::new("AKIDSECOND", "secret").with_expiry(t0 + s(7200));
        let (source, fetches) = scripted(vec![Ok(first), Err(outage()), Err(outage()), Ok(second)]);
        let count = || fetches.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(source.current(t0).unwrap().access_key_id(), "AKIDFIRST");
        // Refresh is due at 55 min; the source is down.
        let due = t0 + s(3600) - REFRESH_BEFORE_EXPIRY;
        assert_eq!(source.current(due).unwrap().access_key_id(), "AKIDFIRST");
        assert_eq!(count(), 2);
        // Every request of the next second uses the old key without asking again...
        for ms in [1, 200, 999] {
            let at = due + Duration::from_millis(ms);
            assert_eq!(source.current(at).unwrap().access_key_id(), "AKIDFIRST");
        }
        assert_eq!(count(), 2, "no fetch during the pause");
        // ...then it asks again, fails, and waits twice as long.
        assert_eq!(
            source.current(due + s(1)).unwrap().access_key_id(),
            "AKIDFIRST"
        );
        assert_eq!(count(), 3);
        assert_eq!(
            source.current(due + s(2)).unwrap().access_key_id(),
            "AKIDFIRST"
        );
        assert_eq!(count(), 3, "the second pause is 2 s");
        assert_eq!(
            source.current(due + s(3)).unwrap().access_key_id(),
            "AKIDSECOND"
        );
        assert_eq!(count(), 4);
        assert_eq!(failure_pause(1), s(1));
        assert_eq!(failure_pause(30), MIN_REFRESH_INTERVAL, "capped");
    }

    #[test]
    fn credentials_that_arrive_expired_are_an_error_and_not_fetched_on_every_request() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let stale =
            Credentials::new("AKIDSTALE", "secret").with_expiry(t0 - Duration::from_secs(90));
        let fresh =
            Credentials::new("AKIDFRESH", "secret").with_expiry(t0 + Duration::from_secs(3600));
        let (source, fetches) = scripted(vec![Ok(stale), Ok(fresh)]);
        let err = source.current(t0).expect_err("expired on arrival");
        assert!(matches!(err.kind, CloudErrorKind::Retry { .. }), "{err:?}");
        assert!(
            err.message.contains("had expired 1m30s before"),
            "{}",
            err.message
        );
        let again = source
            .current(t0 + Duration::from_millis(500))
            .expect_err("still paused");
        assert!(
            again.message.contains("asking again in"),
            "{}",
            again.message
        );
        assert_eq!(fetches.load(std::sync::atomic::Ordering::SeqCst), 1);
        let fresh = source.current(t0 + Duration::from_secs(1)).expect("fresh");
        assert_eq!(fresh.access_key_id(), "AKIDFRESH");
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
