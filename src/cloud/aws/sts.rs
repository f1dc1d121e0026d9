//! STS, for the roles the credential chain assumes: `AssumeRoleWithWebIdentity`
//! (IRSA, a profile's `web_identity_token_file`), sent unsigned with the token read
//! from its file at every fetch, since the kubelet rotates it; and `AssumeRole` (a
//! profile's `role_arn`, the cloud config's `RoleARN`), signed with the source
//! credentials.
//!
//! The endpoint is the region's (`https://sts.<region>.amazonaws.com/`), as the SDKs
//! choose it by default, unless `AWS_ENDPOINT_URL_STS` or `AWS_ENDPOINT_URL` names
//! another. Nothing here logs a token or a key; messages name the role, the file and
//! the endpoint.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use super::credentials::{
    AwsEnv, ChainSettings, Clock, CredentialSource, Credentials, Fetch, read_bounded,
};
use super::query::{Endpoint, Params, QueryClient, QueryClientConfig, QueryError};
use super::sigv4::parse_rfc3339_utc;
use super::xml::Element;
use crate::provider::{CloudError, CloudErrorKind};

/// The STS API version of every request.
pub const STS_API_VERSION: &str = "2011-06-15";
/// A web identity token is a JWT of a few kilobytes (STS takes up to 20 000
/// characters); anything much larger is not one.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// The STS endpoint for `region`: `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, then
/// the regional endpoint (the SDKs' default since `sts_regional_endpoints=regional`).
pub fn endpoint(env: &AwsEnv, region: &str) -> Result<Endpoint, CloudError> {
    super::service_endpoint(None, "AWS_ENDPOINT_URL_STS", "sts", env, region)
}

/// A role to assume with `AssumeRole`, and what the profile (or cloud config) asks
/// of the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssumeRoleSettings {
    pub role_arn: String,
    /// `role_session_name`; default `route-controller-<unix seconds>`.
    pub session_name: Option<String>,
    /// `external_id`, for roles whose trust policy requires one.
    pub external_id: Option<String>,
    /// `duration_seconds`; default STS's (one hour).
    pub duration_seconds: Option<u32>,
    /// Where the role was asked for, for messages: `RoleARN`, or the profile.
    pub named_in: String,
}

impl AssumeRoleSettings {
    pub fn new(role_arn: &str, named_in: &str) -> AssumeRoleSettings {
        AssumeRoleSettings {
            role_arn: role_arn.to_string(),
            session_name: None,
            external_id: None,
            duration_seconds: None,
            named_in: named_in.to_string(),
        }
    }
}

/// `AssumeRoleWithWebIdentity` with the token in `token_file`.
pub struct WebIdentity {
    sts: QueryClient,
    role_arn: String,
    token_file: PathBuf,
    session_name: Option<String>,
    clock: Clock,
}

impl WebIdentity {
    pub fn new(
        env: &AwsEnv,
        settings: &ChainSettings,
        role_arn: &str,
        token_file: PathBuf,
        session_name: Option<&str>,
    ) -> Result<WebIdentity, CloudError> {
        let sts = QueryClient::new(QueryClientConfig {
            endpoint: endpoint(env, &settings.region)?,
            region: settings.region.clone(),
            service: "sts",
            version: STS_API_VERSION,
            credentials: None,
            clock: env.clock(),
            timeout: settings.timeout,
            // STS is reached as EC2 is: the same CA bundle, the same proxy rule.
            trust: super::trust(env, super::credentials::profile_ca_bundle(env).as_deref())?,
            proxying: crate::Proxying::from_process(),
        });
        Ok(WebIdentity {
            sts,
            role_arn: role_arn.to_string(),
            token_file,
            session_name: session_name.map(str::to_string),
            clock: env.clock(),
        })
    }
}

impl Fetch for WebIdentity {
    fn fetch(&self, _now: SystemTime) -> Result<Credentials, CloudError> {
        // Read at every fetch: the kubelet replaces the projected token long before
        // it expires, and STS refuses an expired one.
        let token = read_bounded(
            &self.token_file,
            MAX_TOKEN_BYTES,
            "the web identity token file",
        )
        .map_err(CloudError::invalid)?;
        if token.is_empty() {
            return Err(CloudError::invalid(format!(
                "the web identity token file {} is empty",
                self.token_file.display()
            )));
        }
        let params = Params::new()
            .add("RoleArn", &self.role_arn)
            .add(
                "RoleSessionName",
                session_name(&self.session_name, &self.clock),
            )
            .add("WebIdentityToken", token);
        let action = "AssumeRoleWithWebIdentity";
        let root = self
            .sts
            .call(action, &params)
            .map_err(|e| sts_error(action, &self.role_arn, &self.sts, e))?;
        credentials_from_reply(&root, action)
    }

    fn origin(&self) -> String {
        format!(
            "web identity (role {}, token file {})",
            self.role_arn,
            self.token_file.display()
        )
    }
}

/// `AssumeRole`, signed with the source's credentials.
pub struct AssumeRole {
    sts: QueryClient,
    role: AssumeRoleSettings,
    clock: Clock,
}

impl AssumeRole {
    pub fn new(
        env: &AwsEnv,
        settings: &ChainSettings,
        source: CredentialSource,
        role: AssumeRoleSettings,
    ) -> Result<AssumeRole, CloudError> {
        let sts = QueryClient::new(QueryClientConfig {
            endpoint: endpoint(env, &settings.region)?,
            region: settings.region.clone(),
            service: "sts",
            version: STS_API_VERSION,
            credentials: Some(source),
            clock: env.clock(),
            timeout: settings.timeout,
            // STS is reached as EC2 is: the same CA bundle, the same proxy rule.
            trust: super::trust(env, super::credentials::profile_ca_bundle(env).as_deref())?,
            proxying: crate::Proxying::from_process(),
        });
        Ok(AssumeRole {
            sts,
            role,
            clock: env.clock(),
        })
    }
}

impl Fetch for AssumeRole {
    fn fetch(&self, _now: SystemTime) -> Result<Credentials, CloudError> {
        let mut params = Params::new().add("RoleArn", &self.role.role_arn).add(
            "RoleSessionName",
            session_name(&self.role.session_name, &self.clock),
        );
        if let Some(seconds) = self.role.duration_seconds {
            params = params.add("DurationSeconds", seconds.to_string());
        }
        if let Some(external_id) = &self.role.external_id {
            params = params.add("ExternalId", external_id);
        }
        let action = "AssumeRole";
        let root = self
            .sts
            .call(action, &params)
            .map_err(|e| sts_error(action, &self.role.role_arn, &self.sts, e))?;
        credentials_from_reply(&root, action)
    }

    fn origin(&self) -> String {
        format!(
            "role {} ({}) assumed with {}",
            self.role.role_arn,
            self.role.named_in,
            self.sts.credentials_origin()
        )
    }
}

fn session_name(configured: &Option<String>, clock: &Clock) -> String {
    match configured {
        Some(name) => name.clone(),
        None => {
            let secs = clock()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            format!("route-controller-{secs}")
        }
    }
}

/// What an STS error means: throttling, a server error or an expired token (the
/// kubelet writes a new one) may pass; anything else is a setting to fix.
fn sts_error(action: &str, role_arn: &str, sts: &QueryClient, error: QueryError) -> CloudError {
    const PASSING: &[&str] = &[
        "Throttling",
        "ThrottlingException",
        "IDPCommunicationError",
        "ExpiredTokenException",
    ];
    let (kind, hint) = match &error {
        QueryError::Credentials(e) => return e.clone(),
        QueryError::Service { status, code, .. }
            if *status >= 500 || PASSING.contains(&code.as_str()) =>
        {
            (CloudErrorKind::Retry { after: None }, "")
        }
        QueryError::Service { code, .. } if code == "InvalidIdentityToken" => (
            CloudErrorKind::Invalid,
            "; the token's issuer must be an IAM OIDC identity provider of the account (the \
             cluster's service account issuer) and its audience sts.amazonaws.com",
        ),
        QueryError::Service { code, .. } if code == "AccessDenied" => (
            CloudErrorKind::Invalid,
            "; the role's trust policy must allow this identity to assume it",
        ),
        QueryError::Service { .. } => (CloudErrorKind::Invalid, ""),
        QueryError::Transport { .. } | QueryError::Unreadable { .. } | QueryError::Fenced(_) => {
            (CloudErrorKind::Retry { after: None }, "")
        }
    };
    CloudError::new(
        kind,
        format!(
            "STS {action} of {role_arn} at {}: {error}{hint}",
            sts.endpoint().url
        ),
    )
}

/// The `<Credentials>` of an `AssumeRole*` reply.
fn credentials_from_reply(root: &Element, action: &str) -> Result<Credentials, CloudError> {
    let unreadable = |what: &str| {
        CloudError::new(
            CloudErrorKind::Retry { after: None },
            format!("STS {action} answered without {what}"),
        )
    };
    let credentials = root
        .find("Credentials")
        .ok_or_else(|| unreadable("<Credentials>"))?;
    let field = |name: &str| {
        credentials
            .text_of(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| unreadable(name))
    };
    let expiration = field("Expiration")?;
    let expires = parse_expiration(expiration)
        .ok_or_else(|| unreadable(&format!("a readable Expiration (got {expiration:?})")))?;
    Ok(
        Credentials::new(field("AccessKeyId")?, field("SecretAccessKey")?)
            .with_session_token(field("SessionToken")?)
            .with_expiry(expires),
    )
}

/// An RFC 3339 UTC time, written with `Z` or `+00:00`.
pub fn parse_expiration(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    match text.strip_suffix("+00:00") {
        Some(rest) => parse_rfc3339_utc(&format!("{rest}Z")),
        None => parse_rfc3339_utc(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_regions_unless_a_variable_names_one() {
        let env = AwsEnv::new();
        assert_eq!(
            endpoint(&env, "eu-west-1").expect("default").url,
            "https://sts.eu-west-1.amazonaws.com/"
        );
        let env = AwsEnv::new().with_var("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        assert_eq!(
            endpoint(&env, "eu-west-1").expect("generic").host,
            "127.0.0.1:1"
        );
        let env = env.with_var("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:2");
        assert_eq!(
            endpoint(&env, "eu-west-1").expect("sts").host,
            "127.0.0.1:2"
        );
        let env = AwsEnv::new().with_var("AWS_ENDPOINT_URL_STS", "sts.local");
        let err = endpoint(&env, "eu-west-1").expect_err("no scheme");
        assert!(
            err.message.contains("AWS_ENDPOINT_URL_STS"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_reply_gives_the_keys_token_and_expiry() {
        let root = Element::parse(
            "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
             <AccessKeyId>ASIAWEB</AccessKeyId><SecretAccessKey>s</SecretAccessKey>\
             <SessionToken>t</SessionToken><Expiration>2030-01-01T01:00:00+00:00</Expiration>\
             </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
        )
        .expect("xml");
        let creds = credentials_from_reply(&root, "AssumeRoleWithWebIdentity").expect("reads");
        assert_eq!(creds.access_key_id(), "ASIAWEB");
        assert_eq!(creds.session_token(), Some("t"));
        assert_eq!(creds.expires(), parse_rfc3339_utc("2030-01-01T01:00:00Z"));
        let no_token = Element::parse(
            "<AssumeRoleResponse><Credentials><AccessKeyId>A</AccessKeyId>\
             <SecretAccessKey>s</SecretAccessKey><Expiration>2030-01-01T01:00:00Z</Expiration>\
             </Credentials></AssumeRoleResponse>",
        )
        .expect("xml");
        let err = credentials_from_reply(&no_token, "AssumeRole").expect_err("no token");
        assert!(err.message.contains("SessionToken"), "{}", err.message);
    }

    /// Invariant 8 for STS replies (moto's shape, mutated).
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz::{check, config, text};
        use crate::fuzz_seed;

        static REPLIES: &[&[u8]] = &[fuzz_seed!("sts-assume-role-with-web-identity.xml")];

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn sts_credentials(input in text(REPLIES)) {
                check("the STS credentials reader", move || {
                    if let Ok(root) = Element::parse(&input) {
                        let _ = credentials_from_reply(&root, "AssumeRoleWithWebIdentity").map(|_| ());
                    }
                });
            }
        }
    }
}
