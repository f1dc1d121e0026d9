//! Container credentials, as ECS and EKS Pod Identity serve them: a GET of
//! `http://169.254.170.2` + `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` (ECS task roles),
//! or of `AWS_CONTAINER_CREDENTIALS_FULL_URI` (EKS Pod Identity's agent at
//! `169.254.170.23` or `[fd00:ec2::23]`), with the `Authorization` header read from
//! `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` at every fetch (the agent rotates it) or
//! taken from `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
//!
//! Over plain HTTP the full URI may only name the hosts the AWS SDKs allow (loopback,
//! 169.254.170.2, 169.254.170.23, fd00:ec2::23; a name must resolve to those alone),
//! so that a token never leaves the node unencrypted. It never goes through a proxy.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::SystemTime;

use serde::Deserialize;

use super::credentials::{AwsEnv, ChainSettings, Credentials, Fetch, local_agent, read_bounded};
use super::sts::parse_expiration;
use crate::provider::{CloudError, CloudErrorKind};
use crate::secret::Secret;

/// Where ECS serves task credentials; the relative URI is a path on it.
pub const ECS_ENDPOINT: &str = "http://169.254.170.2";
const ALLOWED_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(169, 254, 170, 23),
];
const EKS_POD_IDENTITY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23);
const MAX_TOKEN_BYTES: u64 = 16 * 1024;
const MAX_REPLY_BYTES: u64 = 64 * 1024;

/// The container credentials endpoint and how to authorize with it.
pub struct Container {
    url: String,
    authorization: Authorization,
    agent: ureq::Agent,
}

enum Authorization {
    None,
    Token(Secret),
    File(PathBuf),
}

impl Container {
    /// The endpoint the variables name, if any: the relative URI first, as the SDKs.
    pub fn from_env(
        env: &AwsEnv,
        settings: &ChainSettings,
    ) -> Result<Option<Container>, CloudError> {
        let url = if let Some(relative) = env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            let slash = if relative.starts_with('/') { "" } else { "/" };
            format!("{ECS_ENDPOINT}{slash}{relative}")
        } else if let Some(full) = env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI") {
            check_full_uri(full).map_err(|e| {
                CloudError::invalid(format!("AWS_CONTAINER_CREDENTIALS_FULL_URI {full:?}: {e}"))
            })?;
            full.to_string()
        } else {
            return Ok(None);
        };
        let authorization = match (
            env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"),
            env.var("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
        ) {
            (Some(file), _) => Authorization::File(PathBuf::from(file)),
            (None, Some(token)) => Authorization::Token(Secret::new(token)),
            (None, None) => Authorization::None,
        };
        Ok(Some(Container {
            url,
            authorization,
            agent: local_agent(settings.timeout),
        }))
    }

    fn token(&self) -> Result<Option<Secret>, CloudError> {
        let token = match &self.authorization {
            Authorization::None => return Ok(None),
            Authorization::Token(token) => token.clone(),
            Authorization::File(path) => Secret::new(
                read_bounded(
                    path,
                    MAX_TOKEN_BYTES,
                    "the container authorization token file",
                )
                .map_err(CloudError::invalid)?,
            ),
        };
        if token.expose().contains(['\r', '\n']) {
            return Err(CloudError::invalid(
                "the container authorization token holds a line break: it cannot be a header",
            ));
        }
        Ok(Some(token))
    }
}

impl Fetch for Container {
    fn fetch(&self, _now: SystemTime) -> Result<Credentials, CloudError> {
        let retry =
            |message: String| CloudError::new(CloudErrorKind::Retry { after: None }, message);
        let mut request = self.agent.get(&self.url);
        if let Some(token) = self.token()? {
            request = request.header("Authorization", token.expose());
        }
        let mut response = request.call().map_err(|e| {
            retry(format!(
                "GET {}: {}",
                shown_url(&self.url),
                crate::http::describe(&e)
            ))
        })?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_string()
            .map_err(|e| {
                retry(format!(
                    "GET {}: reading the reply: {e}",
                    shown_url(&self.url)
                ))
            })?;
        if status != 200 {
            let message = format!(
                "GET {} answered HTTP {status}: {}",
                shown_url(&self.url),
                error_text(&body)
            );
            return Err(match status {
                500.. | 429 => retry(message),
                _ => CloudError::invalid(message),
            });
        }
        parse_container_credentials(&body)
            .map_err(|e| retry(format!("GET {}: {e}", shown_url(&self.url))))
    }

    fn origin(&self) -> String {
        let authorization = match &self.authorization {
            Authorization::None => String::new(),
            Authorization::Token(_) => ", token from AWS_CONTAINER_AUTHORIZATION_TOKEN".into(),
            Authorization::File(path) => format!(", token file {}", path.display()),
        };
        format!(
            "container credentials ({}{authorization})",
            shown_url(&self.url)
        )
    }
}

/// The endpoint for logs and errors: ECS's relative URI is a credential of its own
/// (whoever reaches 169.254.170.2 with it gets the role's keys), so only its scheme
/// and host are shown.
fn shown_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let host = rest.split('/').next().unwrap_or(rest);
            format!("{scheme}://{host}/…")
        }
        None => "…".to_string(),
    }
}

/// Over `https` any host; over `http` only hosts that are, or resolve only to,
/// loopback or the ECS and EKS Pod Identity addresses.
pub fn check_full_uri(url: &str) -> Result<(), String> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or("must start with http:// or https://")?;
    let authority = rest.split('/').next().unwrap_or_default();
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or("has an unclosed [")?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("has no host".into());
    }
    let port: u16 = match port {
        Some(p) => p
            .parse()
            .map_err(|_| format!("has an unusable port {p:?}"))?,
        None => 80,
    };
    let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    if addresses.is_empty() || !addresses.iter().all(allowed) {
        return Err(format!(
            "over http only loopback, 169.254.170.2 (ECS), 169.254.170.23 or fd00:ec2::23 \
             (EKS Pod Identity) may serve credentials, as in the AWS SDKs; {host} is {addresses:?} \
             (use https for another host)"
        ));
    }
    Ok(())
}

fn allowed(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || ALLOWED_V4.contains(v4),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || *v6 == EKS_POD_IDENTITY_V6
                || v6
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || ALLOWED_V4.contains(&v4))
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ContainerCredentials {
    access_key_id: String,
    secret_access_key: String,
    token: String,
    expiration: String,
}

fn parse_container_credentials(body: &str) -> Result<Credentials, String> {
    let parsed: ContainerCredentials = serde_json::from_str(body)
        .map_err(|e| format!("the credentials document is not the expected JSON: {e}"))?;
    let expires = parse_expiration(&parsed.expiration)
        .ok_or_else(|| format!("unreadable Expiration {:?}", parsed.expiration))?;
    Ok(
        Credentials::new(&parsed.access_key_id, &parsed.secret_access_key)
            .with_session_token(&parsed.token)
            .with_expiry(expires),
    )
}

/// An error document's `code: message`, or the start of the body.
fn error_text(body: &str) -> String {
    #[derive(Deserialize)]
    struct ErrorDocument {
        code: Option<String>,
        message: Option<String>,
    }
    match serde_json::from_str::<ErrorDocument>(body) {
        Ok(ErrorDocument { code, message }) if code.is_some() || message.is_some() => {
            format!(
                "{}: {}",
                code.unwrap_or_default(),
                message.unwrap_or_default()
            )
        }
        _ => body.chars().take(200).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_uris_over_http_must_name_a_local_or_agent_address() {
        for ok in [
            "http://127.0.0.1:8080/creds",
            "http://169.254.170.2/v2/credentials/x",
            "http://169.254.170.23/v1/credentials",
            "http://[fd00:ec2::23]/v1/credentials",
            "http://[::1]:80/",
            "http://localhost:1/",
            "https://creds.example.com/x",
        ] {
            assert_eq!(check_full_uri(ok), Ok(()), "{ok}");
        }
        for refused in [
            "http://10.0.0.1/creds",
            "http://169.254.169.254/latest",
            "http://[fd00:ec2::254]/",
            "ftp://127.0.0.1/",
            "http:///x",
        ] {
            assert!(check_full_uri(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn the_relative_uri_is_a_path_on_the_ecs_endpoint_and_wins_over_the_full_one() {
        let env = AwsEnv::new()
            .with_var(
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                "/v2/credentials/abc",
            )
            .with_var("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/x");
        let container = Container::from_env(&env, &ChainSettings::new("eu-west-1"))
            .expect("valid")
            .expect("set");
        assert_eq!(container.url, "http://169.254.170.2/v2/credentials/abc");
        let env = AwsEnv::new().with_var("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.1.2.3/x");
        let err = Container::from_env(&env, &ChainSettings::new("eu-west-1"))
            .err()
            .expect("refused");
        assert!(
            err.message.contains("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_document_gives_keys_token_and_expiry() {
        let creds = parse_container_credentials(
            r#"{"AccessKeyId":"ASIAPOD","SecretAccessKey":"s","Token":"t",
                "AccountId":"123456789012","Expiration":"2030-01-01T01:00:00Z"}"#,
        )
        .expect("parses");
        assert_eq!(creds.access_key_id(), "ASIAPOD");
        assert_eq!(creds.session_token(), Some("t"));
        assert!(parse_container_credentials(r#"{"code":"x"}"#).is_err());
    }

    /// Invariant 8 for the container endpoint's document (IMDS's shape).
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz::{check, config, text};
        use crate::fuzz_seed;

        static DOCUMENTS: &[&[u8]] = &[fuzz_seed!("aws-role-credentials.json")];

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn container_credentials(input in text(DOCUMENTS)) {
                check("the container credentials parser", move || {
                    let _ = parse_container_credentials(&input).map(|_| ());
                    let _ = error_text(&input);
                });
            }
        }
    }
}
