//! One signed call of an AWS Query API (EC2; IAM in the tests): a form-encoded POST
//! to the endpoint, signed with SigV4, answered with XML; or of a JSON 1.1 API
//! (Service Quotas' one read): a JSON POST naming its action in `X-Amz-Target`.
//!
//! This layer knows HTTP, signing and the XML error shape, but not what an error
//! means for the controller; the provider decides that. It never logs credentials or
//! the `Authorization` header, and never retries: one `call` is one request.

use std::fmt;
use std::time::Duration;

use super::credentials::{Clock, CredentialSource, Credentials};
use super::sigv4::{self, RequestParts, SigningKey};
use super::xml::{Element, ErrorReply};
use crate::provider::CloudError;

const CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";
/// What the JSON 1.1 APIs (Service Quotas) take.
const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.1";
/// Error bodies are quoted in messages only this far.
const BODY_SNIPPET: usize = 300;

/// Where requests go: `https://ec2.eu-west-1.amazonaws.com/`, or an override such as
/// moto's `http://127.0.0.1:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL requests are sent to.
    pub url: String,
    /// The `Host` header, as signed: host, plus the port if the URL names one.
    pub host: String,
    /// The request path (`/` unless the override has one).
    pub path: String,
}

impl Endpoint {
    /// Parses an `http://` or `https://` URL with an optional port and path.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let url = url.trim();
        let rest = url
            .strip_prefix("https://")
            .or_else(|| url.strip_prefix("http://"))
            .ok_or_else(|| format!("endpoint {url:?} must start with https:// or http://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains(['@', '?', '#', ' ']) {
            return Err(format!("endpoint {url:?} has no usable host"));
        }
        if path.contains(['?', '#']) {
            return Err(format!(
                "endpoint {url:?} must not have a query or fragment"
            ));
        }
        let scheme = &url[..url.len() - rest.len()];
        Ok(Endpoint {
            url: format!("{scheme}{authority}{path}"),
            host: authority.to_string(),
            path: path.to_string(),
        })
    }

    /// The public endpoint of `service` in `region`.
    pub fn for_region(service: &str, region: &str) -> Endpoint {
        let domain = if region.starts_with("cn-") {
            "amazonaws.com.cn"
        } else {
            "amazonaws.com"
        };
        let host = format!("{service}.{region}.{domain}");
        Endpoint {
            url: format!("https://{host}/"),
            host,
            path: "/".into(),
        }
    }
}

/// Query parameters in the order they are sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn new() -> Params {
        Params::default()
    }

    pub fn add(mut self, name: impl Into<String>, value: impl Into<String>) -> Params {
        self.0.push((name.into(), value.into()));
        self
    }

    /// `Filter.N.Name=name` with `Filter.N.Value.M=values[M-1]`.
    pub fn filter(mut self, n: usize, name: &str, values: &[&str]) -> Params {
        self.0.push((format!("Filter.{n}.Name"), name.to_string()));
        for (m, value) in values.iter().enumerate() {
            self.0
                .push((format!("Filter.{n}.Value.{}", m + 1), value.to_string()));
        }
        self
    }

    /// `Prefix.1=values[0]`, `Prefix.2=…` (EC2's `InstanceId.N`).
    pub fn list(mut self, prefix: &str, values: &[&str]) -> Params {
        for (i, value) in values.iter().enumerate() {
            self.0
                .push((format!("{prefix}.{}", i + 1), value.to_string()));
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn encode(&self, action: &str, version: &str) -> String {
        let mut body = format!("Action={}&Version={}", enc(action), enc(version));
        for (name, value) in &self.0 {
            body.push('&');
            body.push_str(&enc(name));
            body.push('=');
            body.push_str(&enc(value));
        }
        body
    }
}

fn enc(s: &str) -> String {
    sigv4::uri_encode(s, true)
}

/// Why a call failed, before any interpretation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// The service answered with an error status. `code` is empty when the body was
    /// not an AWS error document (moto's HTML 500s); `message` then quotes the body.
    Service {
        status: u16,
        code: String,
        message: String,
        request_id: Option<String>,
    },
    /// The request failed in transit. `maybe_sent` is false only when it certainly
    /// never reached the service (no connection was made).
    Transport { maybe_sent: bool, message: String },
    /// A success status with a body that is not the expected XML.
    Unreadable { status: u16, message: String },
    /// No credentials to sign with.
    Credentials(CloudError),
    /// Not sent: the [`Fence`](crate::Fence) is closed.
    Fenced(CloudError),
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Service {
                status,
                code,
                message,
                request_id,
            } => {
                if code.is_empty() {
                    write!(f, "HTTP {status}: {message}")?;
                } else {
                    write!(f, "{code}: {message} (HTTP {status})")?;
                }
                if let Some(id) = request_id {
                    write!(f, " [request {id}]")?;
                }
                Ok(())
            }
            QueryError::Transport { message, .. } => f.write_str(message),
            QueryError::Unreadable { status, message } => {
                write!(f, "unreadable reply (HTTP {status}): {message}")
            }
            QueryError::Credentials(e) | QueryError::Fenced(e) => f.write_str(&e.message),
        }
    }
}

/// A client of one Query API at one endpoint, signing with one credential source.
pub struct QueryClient {
    agent: ureq::Agent,
    endpoint: Endpoint,
    region: String,
    service: &'static str,
    version: &'static str,
    /// `None` for the one API called unsigned (STS `AssumeRoleWithWebIdentity`).
    credentials: Option<CredentialSource>,
    clock: Clock,
}

impl fmt::Debug for QueryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryClient")
            .field("endpoint", &self.endpoint.url)
            .field("region", &self.region)
            .field("service", &self.service)
            .field(
                "credentials",
                &self.credentials.as_ref().map(CredentialSource::origin),
            )
            .finish_non_exhaustive()
    }
}

/// Settings of a [`QueryClient`].
pub struct QueryClientConfig {
    /// The CAs trusted (`AWS_CA_BUNDLE`).
    pub trust: crate::Trust,
    pub proxying: crate::Proxying,
    pub endpoint: Endpoint,
    pub region: String,
    /// The signing name: `ec2`, `iam`.
    pub service: &'static str,
    /// The API version: `2016-11-15` for EC2, `2010-05-08` for IAM.
    pub version: &'static str,
    /// What signs the requests; `None`: they go unsigned (STS
    /// `AssumeRoleWithWebIdentity`, where the web identity token is the proof).
    pub credentials: Option<CredentialSource>,
    pub clock: Clock,
    /// Whole-request timeout; connecting has its own, shorter one.
    pub timeout: Duration,
}

impl QueryClient {
    pub fn new(config: QueryClientConfig) -> QueryClient {
        let agent = crate::http::agent_config(&config.trust, &config.proxying)
            .timeout_connect(Some(config.timeout.min(Duration::from_secs(5))))
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            // A redirect would need a new signature; the Query APIs never send one.
            .max_redirects(0)
            .user_agent(concat!("route-controller/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        QueryClient {
            agent,
            endpoint: config.endpoint,
            region: config.region,
            service: config.service,
            version: config.version,
            credentials: config.credentials,
            clock: config.clock,
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    /// What signs the requests; `None` when they go unsigned.
    pub fn credentials(&self) -> Option<&CredentialSource> {
        self.credentials.as_ref()
    }

    /// Where the signing credentials come from, for messages.
    pub fn credentials_origin(&self) -> String {
        match &self.credentials {
            Some(source) => source.origin(),
            None => "no credentials (unsigned requests)".into(),
        }
    }

    /// Sends `action` with `params` and returns the reply's root element.
    pub fn call(&self, action: &str, params: &Params) -> Result<Element, QueryError> {
        let body = params.encode(action, self.version);
        let (status, text) = self.send(&self.endpoint, self.service, CONTENT_TYPE, None, &body)?;
        if !(200..300).contains(&status) {
            return Err(service_error(status, &text));
        }
        // A success's body may hold credentials (STS's SecretAccessKey, SessionToken):
        // it is never quoted.
        let root = Element::parse(&text).map_err(|e| QueryError::Unreadable {
            status,
            message: format!("{e} (a {} byte reply, not shown)", text.len()),
        })?;
        // A reply for another action means the request went somewhere else (moto
        // routes unsigned requests to S3): never treat that as success.
        let expected = format!("{action}Response");
        if root.name != expected {
            return Err(QueryError::Unreadable {
                status,
                message: format!("expected <{expected}>, got <{}>", root.name),
            });
        }
        Ok(root)
    }

    /// Sends one call of an AWS JSON 1.1 API (Service Quotas) to another service's
    /// `endpoint`, signed for `service` with this client's credentials and HTTP agent:
    /// `body` with `X-Amz-Target: target`; returns the reply's body. An error reply is
    /// read as JSON (`__type`, `message`) or, as moto's IAM checks answer, as the XML
    /// error document.
    pub fn call_json(
        &self,
        endpoint: &Endpoint,
        service: &str,
        target: &str,
        body: &str,
    ) -> Result<String, QueryError> {
        let (status, text) = self.send(endpoint, service, JSON_CONTENT_TYPE, Some(target), body)?;
        if !(200..300).contains(&status) {
            return Err(match json_error(&text) {
                Some((code, message)) => QueryError::Service {
                    status,
                    code,
                    message,
                    request_id: None,
                },
                None => service_error(status, &text),
            });
        }
        Ok(text)
    }

    /// Signs and sends one POST; the status and body of whatever answered.
    fn send(
        &self,
        endpoint: &Endpoint,
        service: &str,
        content_type: &str,
        target: Option<&str>,
        body: &str,
    ) -> Result<(u16, String), QueryError> {
        let now = (self.clock)();
        let credentials = match &self.credentials {
            Some(source) => Some(source.current(now).map_err(QueryError::Credentials)?),
            None => None,
        };
        let amz_date = sigv4::amz_date(now);
        let mut headers: Vec<(&str, &str)> = vec![
            ("Content-Type", content_type),
            ("Host", &endpoint.host),
            ("X-Amz-Date", &amz_date),
        ];
        if let Some(token) = credentials.as_ref().and_then(Credentials::session_token) {
            headers.push(("X-Amz-Security-Token", token));
        }
        if let Some(target) = target {
            headers.push(("X-Amz-Target", target));
        }
        let authorization = credentials.as_ref().map(|credentials| {
            sigv4::sign(
                SigningKey {
                    access_key_id: credentials.access_key_id(),
                    secret_access_key: credentials.secret_access_key(),
                    region: &self.region,
                    service,
                },
                RequestParts {
                    method: "POST",
                    path: &endpoint.path,
                    query: &[],
                    headers: &headers,
                    payload: body.as_bytes(),
                },
                &amz_date,
            )
            .authorization
        });
        let mut request = self.agent.post(&endpoint.url);
        for (name, value) in &headers {
            request = request.header(*name, *value);
        }
        if let Some(authorization) = &authorization {
            request = request.header("Authorization", authorization);
        }
        let result = request.send(body.as_bytes());
        let mut response = result.map_err(|e| transport_error(&e))?;
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| QueryError::Transport {
                maybe_sent: true,
                message: format!("reading the reply: {e}"),
            })?;
        Ok((status, text))
    }
}

/// An error status's body as the XML error document, or quoted when it is none.
fn service_error(status: u16, text: &str) -> QueryError {
    match ErrorReply::parse(text) {
        Some(reply) => QueryError::Service {
            status,
            code: reply.code,
            message: reply.message,
            request_id: reply.request_id,
        },
        None => QueryError::Service {
            status,
            code: String::new(),
            message: snippet(text),
            request_id: None,
        },
    }
}

/// A JSON 1.1 error body: the code from `__type` (without the `namespace#` prefix
/// real AWS puts before it) and the message (`message` or `Message`).
pub fn json_error(text: &str) -> Option<(String, String)> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let kind = value.get("__type")?.as_str()?;
    let code = kind.rsplit('#').next().unwrap_or(kind).trim();
    if code.is_empty() {
        return None;
    }
    let message = ["message", "Message"]
        .iter()
        .find_map(|k| value.get(k).and_then(|m| m.as_str()))
        .unwrap_or("");
    Some((code.to_string(), snippet(message)))
}

fn snippet(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(BODY_SNIPPET) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Whether a failed request may have reached the service decides whether a failed
/// mutation is ambiguous; only failures before a connection existed are certain.
fn transport_error(error: &ureq::Error) -> QueryError {
    QueryError::Transport {
        maybe_sent: !crate::http::certainly_unsent(error),
        message: crate::http::describe(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_with_port_and_path() {
        let e = Endpoint::parse("http://127.0.0.1:5000").expect("parses");
        assert_eq!(
            (e.url.as_str(), e.host.as_str(), e.path.as_str()),
            ("http://127.0.0.1:5000/", "127.0.0.1:5000", "/")
        );
        let e = Endpoint::parse("https://vpce-1.ec2.eu-west-1.vpce.amazonaws.com/x/").expect("ok");
        assert_eq!(e.path, "/x/");
        assert!(Endpoint::parse("ec2.amazonaws.com").is_err());
        assert!(Endpoint::parse("https://").is_err());
        assert!(Endpoint::parse("https://h/?a=b").is_err());
        assert_eq!(
            Endpoint::for_region("ec2", "cn-north-1").url,
            "https://ec2.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!(
            Endpoint::for_region("ec2", "eu-west-1").host,
            "ec2.eu-west-1.amazonaws.com"
        );
    }

    #[test]
    fn json_errors_give_the_code_without_its_namespace_and_the_message() {
        assert_eq!(
            json_error(
                r#"{"__type":"com.amazonaws.servicequotas#AccessDeniedException","Message":"no"}"#
            ),
            Some(("AccessDeniedException".into(), "no".into()))
        );
        // moto's JsonRESTError.
        assert_eq!(
            json_error(r#"{"__type": "NoSuchResourceException", "message": "gone"}"#),
            Some(("NoSuchResourceException".into(), "gone".into()))
        );
        assert_eq!(json_error("<ErrorResponse/>"), None);
        assert_eq!(json_error(r#"{"message": "no type"}"#), None);
    }

    #[test]
    fn params_encode_like_botocore() {
        let p = Params::new()
            .add("RouteTableId", "rtb-1")
            .add("DestinationCidrBlock", "10.244.5.0/24")
            .filter(1, "tag-key", &["kubernetes.io/cluster/c"])
            .list("InstanceId", &["i-1", "i-2"]);
        assert_eq!(
            p.encode("CreateRoute", "2016-11-15"),
            "Action=CreateRoute&Version=2016-11-15&RouteTableId=rtb-1&\
             DestinationCidrBlock=10.244.5.0%2F24&Filter.1.Name=tag-key&\
             Filter.1.Value.1=kubernetes.io%2Fcluster%2Fc&InstanceId.1=i-1&InstanceId.2=i-2"
        );
    }
}
