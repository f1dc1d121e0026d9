//! The HTTP side of the Hetzner Cloud provider: one blocking client that counts every
//! request it sends and the rate-limit headers of every reply for the controller,
//! which spends the budget ([`Meter`]); it never waits for budget itself. It turns
//! failures into [`ApiError`]s that say what the controller should do.
//!
//! Failures are classified by the JSON `error.code`, never by the HTTP status alone
//! (the API uses one status for several codes). Whether a failed request may have
//! taken effect decides between "retry" and "ambiguous": a GET never changes
//! anything, a POST whose reply was lost might have.
//!
//! This module never logs or formats the token; messages name the method, the path
//! with its IDs and the API's correlation ID.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::config::{Config, TokenReader};
use crate::fence::Fence;
use crate::metrics::Metrics;
use crate::model::Cidr;
use crate::provider::{CloudError, CloudErrorKind, Meter};

/// The two methods the provider uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    /// Reads; never changes anything, so a lost reply is simply retried.
    Get,
    /// Route actions; a lost reply leaves the outcome unknown.
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// A failed request: what the controller should do, the API's error code if it sent
/// one, and a message naming the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ApiError {
    pub kind: CloudErrorKind,
    pub code: Option<String>,
    pub message: String,
}

impl ApiError {
    pub(super) fn new(kind: CloudErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            code: None,
            message: message.into(),
        }
    }

    /// Whether the API answered with this error code.
    pub(super) fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<ApiError> for CloudError {
    fn from(e: ApiError) -> CloudError {
        CloudError::new(e.kind, e.message)
    }
}

/// A request to send: the path with its IDs (for the URL and messages) and the
/// endpoint with IDs replaced by `-` (for metrics, as HCCM labels them).
#[derive(Clone, Debug)]
pub(super) struct Request<'a> {
    pub method: Method,
    pub path: String,
    pub endpoint: &'static str,
    pub query: Vec<(&'a str, String)>,
    pub body: Option<Vec<u8>>,
}

impl<'a> Request<'a> {
    pub(super) fn get(path: String, endpoint: &'static str) -> Request<'a> {
        Request {
            method: Method::Get,
            path,
            endpoint,
            query: Vec::new(),
            body: None,
        }
    }

    pub(super) fn post(path: String, endpoint: &'static str, body: Vec<u8>) -> Request<'a> {
        Request {
            method: Method::Post,
            path,
            endpoint,
            query: Vec::new(),
            body: Some(body),
        }
    }

    pub(super) fn query(mut self, key: &'a str, value: impl ToString) -> Request<'a> {
        self.query.push((key, value.to_string()));
        self
    }

    /// `GET /path?query`, for messages.
    fn describe(&self) -> String {
        let mut s = format!("{} {}", self.method.as_str(), self.path);
        if !self.query.is_empty() {
            s.push('?');
            s.push_str(&encode_query(&self.query));
        }
        s
    }
}

/// The largest reply accepted (a page of 50 servers is a few tens of kilobytes).
const MAX_REPLY_BYTES: u64 = 16 << 20;

/// The buffer a reply is decoded through.
const READ_BUFFER: usize = 16 << 10;

/// The blocking API client, shared by all threads of one provider.
pub(super) struct Client {
    agent: ureq::Agent,
    base: String,
    token: TokenReader,
    /// The declared rate, for how long to hold back after a refusal without headers.
    per_second: f64,
    /// Requests sent and not yet answered: the API's `RateLimit-Remaining` may not
    /// count them yet.
    in_flight: AtomicU64,
    metrics: Option<Arc<Metrics>>,
    /// Checked right before every request goes out (see [`Fence`]).
    fence: Fence,
    /// How long one request may take, for the fence's bound.
    request_timeout: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

impl Client {
    pub(super) fn new(config: &Config) -> Client {
        let agent: ureq::Agent = crate::http::agent_config()
            .http_status_as_error(false)
            .timeout_global(Some(config.request_timeout))
            // A connect timeout of its own tells "never sent" apart from "no reply".
            .timeout_connect(Some(config.request_timeout.min(Duration::from_secs(5))))
            // A connection the server closed while idle would fail the next POST
            // after it was written, which looks ambiguous; keep idle ones briefly.
            .max_idle_age(Duration::from_secs(5))
            .user_agent(config.user_agent.as_str())
            .build()
            .into();
        Client {
            agent,
            base: config.endpoint.trim_end_matches('/').to_string(),
            token: TokenReader::new(config.token.clone()),
            per_second: config.rate_limit_per_second,
            in_flight: AtomicU64::new(0),
            metrics: config.metrics.clone(),
            fence: Fence::open(),
            request_timeout: config.request_timeout,
        }
    }

    /// From now on every request first passes `fence`, which learns how long one
    /// may take.
    pub(super) fn set_fence(&mut self, fence: Fence) {
        fence.covers(self.request_timeout);
        self.fence = fence;
    }

    /// Whether a token can be had now (the token file is readable and not empty).
    pub(super) fn check_token(&self) -> Result<(), CloudError> {
        self.token.token().map(|_| ())
    }

    /// Sends a GET and decodes its JSON reply. A refusal for the rate limit is not
    /// waited out here: it goes back to the controller, which holds back every request
    /// until the budget refills.
    pub(super) fn get<T: DeserializeOwned>(&self, request: &Request<'_>) -> Result<T, ApiError> {
        self.exchange(request)
    }

    /// Sends a POST and decodes its JSON reply. Never repeated here: whether to try
    /// again is the caller's decision.
    pub(super) fn post<T: DeserializeOwned>(&self, request: &Request<'_>) -> Result<T, ApiError> {
        self.exchange(request)
    }

    fn exchange<T: DeserializeOwned>(&self, request: &Request<'_>) -> Result<T, ApiError> {
        let what = request.describe();
        let token = self
            .token
            .token()
            .map_err(|e| ApiError::new(e.kind, e.message))?;
        // Right before the request leaves: the lease may have been lost, also between
        // the requests of one operation.
        self.fence
            .check()
            .map_err(|e| ApiError::new(e.kind, format!("hcloud: {what}: {}", e.message)))?;
        let mut url = format!("{}{}", self.base, request.path);
        if !request.query.is_empty() {
            url.push('?');
            url.push_str(&encode_query(&request.query));
        }
        let auth = format!("Bearer {}", token.expose());
        Meter::request();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let sent = match (&request.method, &request.body) {
            (Method::Post, body) => self
                .agent
                .post(&url)
                .header("Authorization", &auth)
                .header("Accept", "application/json")
                .content_type("application/json")
                .send(body.as_deref().unwrap_or(b"{}")),
            (Method::Get, _) => self
                .agent
                .get(&url)
                .header("Authorization", &auth)
                .header("Accept", "application/json")
                .call(),
        };
        let others_in_flight = self.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => {
                self.record(request.endpoint, None);
                return Err(transport_error(&e, request.method, &what));
            }
        };
        let status = response.status().as_u16();
        let headers = RateHeaders::read(response.headers());
        let correlation = response
            .headers()
            .get("X-Correlation-Id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.observe_rate(&headers, status, others_in_flight);
        self.record(request.endpoint, Some(status));
        let context = Context {
            what: &what,
            status,
            correlation: correlation.as_deref(),
        };
        let body = response.body_mut().with_config().limit(MAX_REPLY_BYTES);
        if (200..300).contains(&status) {
            // Decoded as it is read: a network of 50 000 routes is megabytes of JSON,
            // which held whole beside what it decodes to would raise the peak of every
            // list. A reply cut short fails the decoding, as transient as a transport
            // error after sending.
            let reader = std::io::BufReader::with_capacity(READ_BUFFER, body.reader());
            return serde_json::from_reader(reader)
                .map_err(|e| undecodable(request.method, &context, &e));
        }
        let body = body
            .read_to_vec()
            .map_err(|e| transport_error(&e, request.method, &what))?;
        Err(api_error(
            request.method,
            &context,
            &body,
            &headers,
            self.per_second,
        ))
    }

    fn observe_rate(&self, headers: &RateHeaders, status: u16, others_in_flight: u64) {
        if let Some(remaining) = headers.remaining {
            // Requests of ours still on their way may not be counted in the reply yet;
            // assuming they are not errs on the side of sending later.
            let remaining = remaining.saturating_sub(others_in_flight);
            Meter::budget(headers.limit, remaining);
        }
        if status == 429 {
            Meter::throttled(headers.throttle_delay(now_unix(), self.per_second));
        }
    }

    fn record(&self, endpoint: &'static str, status: Option<u16>) {
        if let Some(m) = &self.metrics {
            m.cloud_api_request("hcloud", endpoint, status);
        }
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The request and reply details that go into every error message.
struct Context<'a> {
    what: &'a str,
    status: u16,
    correlation: Option<&'a str>,
}

impl Context<'_> {
    fn suffix(&self) -> String {
        match self.correlation {
            Some(id) => format!("HTTP {}, correlation ID {id}", self.status),
            None => format!("HTTP {}", self.status),
        }
    }
}

/// The rate-limit headers of one reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RateHeaders {
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    /// UNIX time at which the budget is fully recovered.
    pub reset: Option<u64>,
    /// Seconds, if the server sent `Retry-After` (Hetzner does not, proxies may).
    pub retry_after: Option<u64>,
}

impl RateHeaders {
    fn read(headers: &ureq::http::HeaderMap) -> RateHeaders {
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        RateHeaders {
            limit: number("RateLimit-Limit"),
            remaining: number("RateLimit-Remaining"),
            reset: number("RateLimit-Reset"),
            retry_after: number("Retry-After"),
        }
    }

    /// How long to send nothing after a refusal for the rate limit: `Retry-After` if
    /// given, otherwise until one request's worth of budget is back. `RateLimit-Reset`
    /// is when the budget is *fully* recovered (an hour away at 3600/h when it is
    /// empty), so waiting for it would stall far longer than needed; the time per
    /// request is the time to full recovery divided by the requests missing.
    pub(super) fn throttle_delay(&self, now_unix: u64, per_second: f64) -> Duration {
        let fallback = Duration::from_secs_f64((1.0 / per_second.max(1e-6)).clamp(0.05, 60.0));
        if let Some(s) = self.retry_after {
            return Duration::from_secs(s.min(3600));
        }
        let (Some(limit), Some(reset)) = (self.limit, self.reset) else {
            return fallback;
        };
        // The budget refills within the hour (3600 requests an hour); a reset further
        // away is wrong, and must neither stop the provider for longer nor overflow
        // the `Instant` the pause is added to.
        let until_full = reset.saturating_sub(now_unix).min(3600);
        if until_full == 0 {
            return fallback;
        }
        let missing = limit.saturating_sub(self.remaining.unwrap_or(0)).max(1);
        Duration::from_secs_f64(until_full as f64 / missing as f64)
            .clamp(Duration::from_millis(50), Duration::from_secs(until_full))
    }
}

/// The API's error body.
#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    #[serde(default)]
    message: String,
}

/// Builds the error for a non-2xx reply.
fn api_error(
    method: Method,
    context: &Context<'_>,
    body: &[u8],
    headers: &RateHeaders,
    per_second: f64,
) -> ApiError {
    let Ok(envelope) = serde_json::from_slice::<ErrorEnvelope>(body) else {
        // Without a code there is no telling what the server did with the request.
        let kind = transient(method);
        return ApiError::new(
            kind,
            format!(
                "hcloud: {}: the API answered without an error code ({}){}",
                context.what,
                context.suffix(),
                outcome_note(method, kind)
            ),
        );
    };
    let ErrorBody { code, message } = envelope.error;
    let kind = match classify(&code, method, context.status) {
        CloudErrorKind::RateLimited { .. } => CloudErrorKind::RateLimited {
            after: headers.throttle_delay(now_unix(), per_second),
        },
        kind => kind,
    };
    let advice = advice(&code).map(|a| format!("; {a}")).unwrap_or_default();
    ApiError {
        kind,
        message: format!(
            "hcloud: {}: {message} ({code}, {}){advice}{}",
            context.what,
            context.suffix(),
            outcome_note(method, kind)
        ),
        code: Some(code),
    }
}

/// What an error code means for the controller, as hcloud-go documents the codes
/// (`hcloud/error.go`). `not_found` is "invalid" here (a missing network or server is
/// a setting to fix); callers that expect it, such as a delete, turn it into "not
/// found" themselves.
pub(super) fn classify(code: &str, method: Method, status: u16) -> CloudErrorKind {
    match code {
        // "Item is locked (Another action is running)"; "The resource has changed
        // during the request, please retry".
        "conflict" | "locked" => CloudErrorKind::Conflict,
        // "The resource is locked. The caller should contact support": not a busy
        // network, and no retry soon will pass.
        "resource_locked" => CloudErrorKind::Invalid,
        // "Cannot perform operation due to maintenance", "Resource currently
        // unavailable", "Robot was not available. The caller may retry the operation
        // after a short delay": refusals, the request was not carried out, so even a
        // POST is not ambiguous (no list is needed to know what it did).
        "maintenance" | "resource_unavailable" | "robot_unavailable" => {
            CloudErrorKind::Retry { after: None }
        }
        "rate_limit_exceeded" => CloudErrorKind::RateLimited {
            after: Duration::from_secs(1),
        },
        "not_found"
        | "invalid_input"
        | "json_error"
        | "uniqueness_error"
        | "forbidden"
        | "token_readonly"
        | "unauthorized"
        | "resource_limit_exceeded"
        | "protected"
        | "unsupported_error"
        | "method_not_allowed"
        | "deprecated_api_endpoint" => CloudErrorKind::Invalid,
        "server_error" | "service_error" | "bad_gateway" | "timeout" | "unavailable" => {
            transient(method)
        }
        // A code this client does not know: a client error is ours to fix, anything
        // else may be passing.
        _ if (400..500).contains(&status) => CloudErrorKind::Invalid,
        _ => transient(method),
    }
}

/// What an action that ended in `error` means: the change was not made, so a code
/// that may pass (or one this client does not know) is worth another attempt.
pub(super) fn action_failure_kind(code: &str) -> CloudErrorKind {
    match classify(code, Method::Get, 0) {
        CloudErrorKind::Ambiguous => CloudErrorKind::Retry { after: None },
        kind => kind,
    }
}

/// A failure that says nothing about whether the request took effect: harmless for
/// a GET, unknown for a POST.
fn transient(method: Method) -> CloudErrorKind {
    match method {
        Method::Get => CloudErrorKind::Retry { after: None },
        Method::Post => CloudErrorKind::Ambiguous,
    }
}

/// What the operator should do about a code, where the message alone does not say.
fn advice(code: &str) -> Option<&'static str> {
    Some(match code {
        "unauthorized" => {
            "the API token was rejected: check HCLOUD_TOKEN (or HCLOUD_TOKEN_FILE); it may be \
             revoked or mistyped"
        }
        "token_readonly" => {
            "the API token is read-only: create a token with Read & Write permission in the \
             project of the network"
        }
        "forbidden" => {
            "the API token may not do this: it needs Read & Write permission in the project \
             of the network"
        }
        "resource_limit_exceeded" => {
            "a limit of the project or network is reached (e.g. routes per network); raise it \
             or use fewer routes"
        }
        "protected" => "the resource is protected against this change; remove the protection",
        "conflict" | "locked" => "the network is busy with another change; retried shortly",
        "resource_locked" => {
            "Hetzner has locked the resource (hcloud-go: \"the caller should contact \
             support\"); open a support request for the network in the Hetzner Console; \
             retried slowly until then"
        }
        "maintenance" => "Hetzner is maintaining the resource; nothing was changed, retried later",
        "resource_unavailable" | "robot_unavailable" => {
            "the resource is unavailable for now; nothing was changed, retried later"
        }
        "rate_limit_exceeded" => {
            "the project's request budget is used up (also by other clients of the project); \
             waiting for it to refill"
        }
        _ => return None,
    })
}

fn outcome_note(method: Method, kind: CloudErrorKind) -> &'static str {
    match (method, kind) {
        (Method::Post, CloudErrorKind::Ambiguous) => "; the change may or may not have been made",
        _ => "",
    }
}

fn undecodable(method: Method, context: &Context<'_>, e: &serde_json::Error) -> ApiError {
    let kind = transient(method);
    ApiError::new(
        kind,
        format!(
            "hcloud: {}: the reply does not decode ({e}; {}){}",
            context.what,
            context.suffix(),
            outcome_note(method, kind)
        ),
    )
}

/// A request that got no usable reply. It certainly was not sent when the connection
/// could not be made; after that, a POST may have reached the API.
fn transport_error(e: &ureq::Error, method: Method, what: &str) -> ApiError {
    let kind = if crate::http::certainly_unsent(e) {
        CloudErrorKind::Retry { after: None }
    } else {
        transient(method)
    };
    ApiError::new(
        kind,
        format!(
            "hcloud: {what}: {}{}",
            crate::http::describe(e),
            outcome_note(method, kind)
        ),
    )
}

/// `a=1&b=x%20y`: percent-encodes everything but unreserved characters.
fn encode_query(pairs: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(&crate::percent::encode(k));
        out.push('=');
        out.push_str(&crate::percent::encode(v));
    }
    out
}

// ---------------------------------------------------------------------------------
// The JSON shapes the provider reads (hcloud-go `schema`); unknown fields are skipped.

#[derive(Deserialize, Debug)]
pub(super) struct NetworkEnvelope {
    pub network: NetworkJson,
}

#[derive(Deserialize, Debug)]
pub(super) struct NetworksEnvelope {
    pub networks: Vec<NetworkJson>,
}

#[derive(Deserialize, Debug, Clone)]
pub(super) struct NetworkJson {
    pub id: u64,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ip_range: String,
    #[serde(default)]
    pub subnets: Vec<SubnetJson>,
    #[serde(default)]
    pub routes: Vec<RouteJson>,
}

#[derive(Deserialize, Debug, Clone)]
pub(super) struct SubnetJson {
    #[serde(default)]
    pub ip_range: String,
}

/// A route of a network, as the API lists it: a destination and a gateway. Kept
/// parsed (22 bytes) when both read back exactly as listed, else as the texts: a
/// network's routes are decoded whole, and 50 000 of them kept as two strings each
/// took 5.6 MB while a list was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RouteJson {
    Parsed {
        destination: Cidr,
        gateway: Ipv4Addr,
    },
    Texts(Box<(String, String)>),
}

impl RouteJson {
    pub fn new(destination: &str, gateway: &str) -> RouteJson {
        let cidr = Cidr::parse(destination)
            .ok()
            .filter(|c| c.to_string() == destination);
        let ip = gateway
            .parse::<Ipv4Addr>()
            .ok()
            .filter(|g| g.to_string() == gateway);
        match (cidr, ip) {
            (Some(destination), Some(gateway)) => RouteJson::Parsed {
                destination,
                gateway,
            },
            _ => RouteJson::Texts(Box::new((destination.to_string(), gateway.to_string()))),
        }
    }

    /// The destination as listed.
    pub fn destination(&self) -> Cow<'_, str> {
        match self {
            RouteJson::Parsed { destination, .. } => Cow::Owned(destination.to_string()),
            RouteJson::Texts(t) => Cow::Borrowed(&t.0),
        }
    }

    /// The gateway as listed.
    pub fn gateway(&self) -> Cow<'_, str> {
        match self {
            RouteJson::Parsed { gateway, .. } => Cow::Owned(gateway.to_string()),
            RouteJson::Texts(t) => Cow::Borrowed(&t.1),
        }
    }

    /// The destination, if it parses.
    pub fn destination_cidr(&self) -> Option<Cidr> {
        match self {
            RouteJson::Parsed { destination, .. } => Some(*destination),
            RouteJson::Texts(t) => Cidr::parse(&t.0).ok(),
        }
    }

    /// The gateway, if it parses.
    pub fn gateway_ip(&self) -> Option<Ipv4Addr> {
        match self {
            RouteJson::Parsed { gateway, .. } => Some(*gateway),
            RouteJson::Texts(t) => t.1.parse().ok(),
        }
    }
}

impl<'de> Deserialize<'de> for RouteJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RouteJson, D::Error> {
        #[derive(Deserialize)]
        struct Wire<'a> {
            #[serde(borrow)]
            destination: Cow<'a, str>,
            #[serde(borrow)]
            gateway: Cow<'a, str>,
        }
        let wire = Wire::deserialize(d)?;
        Ok(RouteJson::new(&wire.destination, &wire.gateway))
    }
}

#[derive(Deserialize, Debug)]
pub(super) struct ServersEnvelope {
    pub servers: Vec<ServerJson>,
    #[serde(default)]
    pub meta: Option<MetaJson>,
}

#[derive(Deserialize, Debug, Clone)]
pub(super) struct ServerJson {
    pub id: u64,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub private_net: Vec<PrivateNetJson>,
}

#[derive(Deserialize, Debug, Clone)]
pub(super) struct PrivateNetJson {
    pub network: u64,
    #[serde(default)]
    pub ip: String,
}

#[derive(Deserialize, Debug, Default)]
pub(super) struct MetaJson {
    #[serde(default)]
    pub pagination: Option<PaginationJson>,
}

#[derive(Deserialize, Debug, Default)]
pub(super) struct PaginationJson {
    #[serde(default)]
    pub next_page: Option<u64>,
}

#[derive(Deserialize, Debug)]
pub(super) struct ActionEnvelope {
    pub action: ActionJson,
}

#[derive(Deserialize, Debug)]
pub(super) struct ActionsEnvelope {
    pub actions: Vec<ActionJson>,
}

#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
pub(super) struct ActionJson {
    pub id: u64,
    #[serde(default)]
    pub command: String,
    /// `running`, `success` or `error`.
    pub status: String,
    #[serde(default)]
    pub error: Option<ActionErrorJson>,
}

#[derive(Deserialize, Debug, Clone, PartialEq, Eq)]
pub(super) struct ActionErrorJson {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the compact network route: a route reads back exactly as listed, kept
    /// parsed only when that is exact (a masked or padded destination, a gateway that
    /// is not one, keep their text). Parsing without the exactness check turns
    /// `10.0.1.5/24` into `10.0.1.0/24`, which a delete would then not find.
    #[test]
    fn a_network_route_reads_back_as_listed() {
        for (destination, gateway, parsed) in [
            ("10.0.1.0/24", "10.0.0.2", true),
            ("fd00:1::/64", "10.0.0.2", true),
            ("10.0.1.5/24", "10.0.0.2", false),
            ("010.0.1.0/24", "10.0.0.2", false),
            ("10.0.1.0/24", "not-an-ip", false),
            ("bogus", "10.0.0.2", false),
        ] {
            let json = format!(r#"{{"destination":"{destination}","gateway":"{gateway}"}}"#);
            let r: RouteJson = serde_json::from_str(&json).unwrap();
            assert_eq!(r.destination(), destination);
            assert_eq!(r.gateway(), gateway);
            assert_eq!(
                matches!(r, RouteJson::Parsed { .. }),
                parsed,
                "{destination}"
            );
            assert_eq!(r.destination_cidr(), Cidr::parse(destination).ok());
            assert_eq!(r.gateway_ip(), gateway.parse().ok());
        }
    }

    fn context() -> Context<'static> {
        Context {
            what: "POST /networks/7/actions/add_route",
            status: 400,
            correlation: Some("abc123"),
        }
    }

    fn error_with(code: &str, method: Method, status: u16) -> ApiError {
        let body = format!(r#"{{"error":{{"code":"{code}","message":"m"}}}}"#);
        let ctx = Context {
            status,
            ..context()
        };
        api_error(method, &ctx, body.as_bytes(), &RateHeaders::default(), 1.0)
    }

    #[test]
    fn busy_codes_are_conflicts() {
        for code in ["conflict", "locked"] {
            assert_eq!(
                classify(code, Method::Post, 409),
                CloudErrorKind::Conflict,
                "{code}"
            );
        }
    }

    #[test]
    fn codes_that_retrying_will_not_fix_are_invalid() {
        for code in [
            "invalid_input",
            "forbidden",
            "token_readonly",
            "unauthorized",
            "resource_limit_exceeded",
            "protected",
            "uniqueness_error",
            "not_found",
        ] {
            assert_eq!(
                classify(code, Method::Post, 400),
                CloudErrorKind::Invalid,
                "{code}"
            );
            assert_eq!(
                classify(code, Method::Get, 400),
                CloudErrorKind::Invalid,
                "{code}"
            );
        }
    }

    #[test]
    fn server_side_failures_retry_reads_and_leave_writes_ambiguous() {
        for code in [
            "server_error",
            "service_error",
            "bad_gateway",
            "timeout",
            "unavailable",
        ] {
            assert_eq!(
                classify(code, Method::Get, 503),
                CloudErrorKind::Retry { after: None },
                "{code}"
            );
            assert_eq!(
                classify(code, Method::Post, 503),
                CloudErrorKind::Ambiguous,
                "{code}"
            );
        }
    }

    /// Guards hcloud-go's meaning of the codes (issue 36, item 6): `resource_locked`
    /// asks for support, not a retry of a busy network, and names the fix;
    /// `maintenance`, `resource_unavailable` and `robot_unavailable` are refusals,
    /// so a POST refused with them is tried again, not taken as ambiguous.
    #[test]
    fn refusals_are_not_ambiguous_and_a_locked_resource_names_support() {
        let e = error_with("resource_locked", Method::Post, 423);
        assert_eq!(e.kind, CloudErrorKind::Invalid);
        assert!(e.message.contains("support"), "{}", e.message);
        for (code, status) in [
            ("maintenance", 403),
            ("resource_unavailable", 412),
            ("robot_unavailable", 503),
        ] {
            for method in [Method::Post, Method::Get] {
                let e = error_with(code, method, status);
                assert_eq!(e.kind, CloudErrorKind::Retry { after: None }, "{code}");
                assert!(!e.message.contains("may or may not"), "{}", e.message);
            }
        }
    }

    #[test]
    fn unknown_codes_follow_the_status_class() {
        assert_eq!(
            classify("brand_new", Method::Post, 422),
            CloudErrorKind::Invalid
        );
        assert_eq!(
            classify("brand_new", Method::Post, 500),
            CloudErrorKind::Ambiguous
        );
        assert_eq!(
            classify("brand_new", Method::Get, 500),
            CloudErrorKind::Retry { after: None }
        );
    }

    #[test]
    fn the_code_decides_not_the_status() {
        // A 409 that says "uniqueness_error" is not a busy network.
        assert_eq!(
            error_with("uniqueness_error", Method::Post, 409).kind,
            CloudErrorKind::Invalid
        );
        assert_eq!(
            error_with("locked", Method::Post, 423).kind,
            CloudErrorKind::Conflict
        );
        assert_eq!(
            error_with("protected", Method::Post, 423).kind,
            CloudErrorKind::Invalid
        );
    }

    #[test]
    fn messages_name_the_request_code_status_and_correlation_id() {
        let e = error_with("token_readonly", Method::Post, 403);
        assert_eq!(e.code.as_deref(), Some("token_readonly"));
        for part in [
            "POST /networks/7/actions/add_route",
            "token_readonly",
            "HTTP 403",
            "abc123",
            "Read & Write",
        ] {
            assert!(
                e.message.contains(part),
                "{part:?} missing in {}",
                e.message
            );
        }
    }

    #[test]
    fn a_reply_without_an_error_code_is_ambiguous_for_writes_and_retried_for_reads() {
        let ctx = Context {
            status: 502,
            ..context()
        };
        let post = api_error(
            Method::Post,
            &ctx,
            b"<html>Bad Gateway</html>",
            &RateHeaders::default(),
            1.0,
        );
        assert_eq!(post.kind, CloudErrorKind::Ambiguous);
        assert!(post.message.contains("may or may not"), "{}", post.message);
        let get = api_error(Method::Get, &ctx, b"", &RateHeaders::default(), 1.0);
        assert_eq!(get.kind, CloudErrorKind::Retry { after: None });
        assert_eq!(get.code, None);
    }

    #[test]
    fn rate_limit_refusal_waits_one_request_worth_of_refill_not_until_full_reset() {
        // Empty bucket of 3600 that is full again in an hour: one request per second.
        let h = RateHeaders {
            limit: Some(3600),
            remaining: Some(0),
            reset: Some(1_000_000 + 3600),
            retry_after: None,
        };
        assert_eq!(h.throttle_delay(1_000_000, 1.0), Duration::from_secs(1));
        let body = br#"{"error":{"code":"rate_limit_exceeded","message":"limit reached"}}"#;
        let ctx = Context {
            status: 429,
            ..context()
        };
        let e = api_error(Method::Get, &ctx, body, &h, 1.0);
        assert!(
            matches!(e.kind, CloudErrorKind::RateLimited { .. }),
            "{e:?}"
        );
    }

    #[test]
    fn retry_after_wins_over_the_reset_estimate() {
        let h = RateHeaders {
            limit: Some(3600),
            remaining: Some(0),
            reset: Some(3600),
            retry_after: Some(7),
        };
        assert_eq!(h.throttle_delay(0, 1.0), Duration::from_secs(7));
    }

    #[test]
    fn without_headers_the_refusal_waits_one_client_interval() {
        assert_eq!(
            RateHeaders::default().throttle_delay(0, 2.0),
            Duration::from_millis(500)
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        let q = encode_query(&[("name", "k8s net/1".to_string()), ("id", "5".to_string())]);
        assert_eq!(q, "name=k8s%20net%2F1&id=5");
    }

    #[test]
    fn server_page_decodes_with_null_pagination_fields() {
        let json = r#"{"servers":[{"id":42,"name":"w1","status":"running",
            "private_net":[{"network":4711,"ip":"10.0.0.2","alias_ips":[],"mac_address":"x"}]}],
            "meta":{"pagination":{"page":1,"per_page":50,"previous_page":null,"next_page":null,
            "last_page":1,"total_entries":1}}}"#;
        let page: ServersEnvelope = serde_json::from_str(json).unwrap();
        assert_eq!(page.servers[0].private_net[0].ip, "10.0.0.2");
        assert_eq!(page.meta.unwrap().pagination.unwrap().next_page, None);
    }

    /// Invariant 8 for the Hetzner Cloud API: any reply body, 2xx or not, and any
    /// rate-limit header decodes to a value or an error, never a panic or a hang.
    mod fuzz {
        use proptest::prelude::*;

        use super::*;
        use crate::fuzz::{bytes, check, config, text};
        use crate::fuzz_seed;

        static BODIES: &[&[u8]] = &[
            fuzz_seed!("hcloud-servers.json"),
            fuzz_seed!("hcloud-network.json"),
            fuzz_seed!("hcloud-networks.json"),
            fuzz_seed!("hcloud-action.json"),
            fuzz_seed!("hcloud-actions.json"),
            fuzz_seed!("hcloud-error.json"),
            fuzz_seed!("hcloud-error-conflict.json"),
        ];
        static NUMBERS: &[&[u8]] = &[b"3600", b"0", b" 12 ", b"1733050000", b"-1"];

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn hcloud_replies(input in bytes(BODIES), status in 100u16..600, post in any::<bool>()) {
                let len = input.len();
                let counts = check("the Hetzner reply decoders", move || {
                    let servers = serde_json::from_slice::<ServersEnvelope>(&input)
                        .map_or(0, |e| e.servers.len());
                    let network = serde_json::from_slice::<NetworkEnvelope>(&input)
                        .map_or(0, |e| e.network.routes.len());
                    let networks = serde_json::from_slice::<NetworksEnvelope>(&input)
                        .map_or(0, |e| e.networks.len());
                    let _ = serde_json::from_slice::<ActionEnvelope>(&input);
                    let actions = serde_json::from_slice::<ActionsEnvelope>(&input)
                        .map_or(0, |e| e.actions.len());
                    let context = Context {
                        what: "POST /networks/7/actions/add_route",
                        status,
                        correlation: Some("c0ffee"),
                    };
                    let method = if post { Method::Post } else { Method::Get };
                    let e = api_error(method, &context, &input, &RateHeaders::default(), 1.0);
                    (servers + network + networks + actions, e.message.len())
                });
                prop_assert!(counts.0 <= len);
                // The message quotes the body at most in part.
                prop_assert!(counts.1 <= len + 1024, "message of {} bytes", counts.1);
            }

            #[test]
            fn rate_limit_headers(
                limit in text(NUMBERS),
                remaining in text(NUMBERS),
                reset in text(NUMBERS),
                retry in text(NUMBERS),
            ) {
                check("the rate-limit headers", move || {
                    let mut headers = ureq::http::HeaderMap::new();
                    for (name, value) in [
                        ("RateLimit-Limit", limit),
                        ("RateLimit-Remaining", remaining),
                        ("RateLimit-Reset", reset),
                        ("Retry-After", retry),
                    ] {
                        if let Ok(v) = ureq::http::HeaderValue::from_str(&value) {
                            headers.insert(name, v);
                        }
                    }
                    let rate = RateHeaders::read(&headers);
                    let delay = rate.throttle_delay(1_733_050_000, 1.0);
                    // The controller's bucket adds it to an Instant.
                    let now = std::time::Instant::now();
                    crate::ratelimit::TokenBucket::new(1.0, 10, now).observe_throttled(delay, now);
                    assert!(delay <= Duration::from_secs(3600), "paused {delay:?}");
                });
            }
        }
    }

    /// Found by the parser tests: `RateLimit-Limit: 0` with a `RateLimit-Reset` far in
    /// the future paused the provider until then (billions of years), and a reset near
    /// `u64::MAX` overflowed the token bucket's `Instant`, a panic on a cloud worker.
    /// Fails without the cap.
    #[test]
    fn a_rate_limit_reset_far_in_the_future_pauses_at_most_an_hour() {
        for reset in [3_333_333_333_333_333_333, u64::MAX] {
            let h = RateHeaders {
                limit: Some(1),
                remaining: Some(0),
                reset: Some(reset),
                retry_after: None,
            };
            let delay = h.throttle_delay(1_733_050_000, 1.0);
            assert!(delay <= Duration::from_secs(3600), "{delay:?}");
            let now = std::time::Instant::now();
            crate::ratelimit::TokenBucket::new(1.0, 10, now).observe_throttled(delay, now);
        }
    }
}
