//! The HTTP side of the Azure provider: one blocking Resource Manager client that
//! passes the lease fence before every request, counts every request and the
//! remaining-requests headers of every reply for the controller ([`Meter`]), and turns
//! failures into [`ArmError`]s that say what the controller should do. It never waits
//! for budget itself; it waits only for long-running operations, whose polls are
//! counted like any request.
//!
//! Failures are classified by ARM's `error.code` where the status alone is not enough
//! (409 is a busy table or a real conflict; 400 a wrong request or a full table).
//! Whether a failed request may have taken effect decides between "retry" and
//! "ambiguous": a GET never changes anything, a PUT whose reply was lost might have.
//!
//! The bearer token goes only to the configured Resource Manager origin: a poll URL
//! elsewhere is refused. Messages name the method, the resource path and ARM's
//! request IDs, never the token.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::auth::Tokens;
use super::config::Config;
use crate::fence::Fence;
use crate::metrics::Metrics;
use crate::provider::{CloudError, CloudErrorKind, Meter};

/// The largest reply read: a table of 1000 routes is a few hundred KiB.
const MAX_REPLY_BYTES: u64 = 16 << 20;

/// The longest wait between two polls of an operation, whatever `Retry-After` says.
const MAX_POLL_WAIT: Duration = Duration::from_secs(60);

/// How long to hold back after a 429 that names no time (ARM always sends one).
const DEFAULT_THROTTLE: Duration = Duration::from_secs(10);

/// The methods the provider uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    /// Reads and polls: never change anything.
    Get,
    /// The route-table write: a lost reply leaves its outcome unknown.
    Put,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
        }
    }
}

/// A failed request: what the controller should do, ARM's error code and the HTTP
/// status if there was a reply, and a message naming the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ArmError {
    pub kind: CloudErrorKind,
    pub status: Option<u16>,
    pub code: Option<String>,
    pub message: String,
}

impl ArmError {
    pub(super) fn new(kind: CloudErrorKind, message: impl Into<String>) -> ArmError {
        ArmError {
            kind,
            status: None,
            code: None,
            message: message.into(),
        }
    }

    /// The write lost the race for the table's ETag (412 PreconditionFailed).
    pub(super) fn is_precondition_failed(&self) -> bool {
        self.status == Some(412)
    }

    /// ARM answered 404: the resource does not exist.
    pub(super) fn is_not_found(&self) -> bool {
        self.status == Some(404)
    }
}

impl From<ArmError> for CloudError {
    fn from(e: ArmError) -> CloudError {
        CloudError::new(e.kind, e.message)
    }
}

impl From<CloudError> for ArmError {
    fn from(e: CloudError) -> ArmError {
        ArmError::new(e.kind, e.message)
    }
}

/// A successful reply.
#[derive(Debug)]
pub(super) struct Reply {
    pub status: u16,
    pub etag: Option<String>,
    /// `Azure-AsyncOperation`: where the operation's status is polled.
    pub async_operation: Option<String>,
    /// `Location`: where a 202's result is polled.
    pub location: Option<String>,
    pub retry_after: Option<Duration>,
    pub body: serde_json::Value,
}

/// The Resource Manager client, shared by all threads of one provider.
pub(super) struct Arm {
    agent: ureq::Agent,
    base: String,
    tokens: Tokens,
    fence: Fence,
    request_timeout: Duration,
    poll_interval: Duration,
    operation_timeout: Duration,
    metrics: Option<Arc<Metrics>>,
    /// Requests sent and not yet answered: ARM's remaining counts may not hold them.
    in_flight: AtomicU64,
}

impl std::fmt::Debug for Arm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arm")
            .field("base", &self.base)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl Arm {
    pub(super) fn new(config: &Config) -> Arm {
        let agent: ureq::Agent = crate::http::agent_config()
            .http_status_as_error(false)
            .timeout_global(Some(config.request_timeout))
            // A connect timeout of its own tells "never sent" apart from "no reply".
            .timeout_connect(Some(config.request_timeout.min(Duration::from_secs(5))))
            // A connection closed by the server while idle would fail the next PUT
            // after it was written, which looks ambiguous; keep idle ones briefly.
            .max_idle_age(Duration::from_secs(5))
            // The token goes to Resource Manager alone, never along a redirect.
            .max_redirects(0)
            .user_agent(config.user_agent.as_str())
            .build()
            .into();
        Arm {
            agent,
            base: config.endpoints.resource_manager.clone(),
            tokens: Tokens::new(config),
            fence: Fence::open(),
            request_timeout: config.request_timeout,
            poll_interval: config.poll_interval,
            operation_timeout: config.operation_timeout,
            metrics: config.metrics.clone(),
            in_flight: AtomicU64::new(0),
        }
    }

    /// From now on every request first passes `fence`, which learns how long one
    /// may take.
    pub(super) fn set_fence(&mut self, fence: Fence) {
        fence.covers(self.request_timeout);
        self.fence = fence;
    }

    /// A token can be had now (at start, to fail fast on a wrong identity).
    pub(super) fn check_identity(&self) -> Result<(), CloudError> {
        self.tokens.token().map(|_| ())
    }

    /// `GET <path>?api-version=<version>`.
    pub(super) fn get(
        &self,
        path: &str,
        api_version: &str,
        endpoint: &'static str,
    ) -> Result<Reply, ArmError> {
        let url = format!("{}{path}?api-version={api_version}", self.base);
        self.send(Method::Get, &url, path, None, None, endpoint)
    }

    /// `PUT <path>` with `If-Match: <etag>`, then the wait for its long-running
    /// operation. Returns once Azure says the operation succeeded.
    pub(super) fn put_and_wait(
        &self,
        path: &str,
        api_version: &str,
        body: &serde_json::Value,
        if_match: Option<&str>,
        endpoint: &'static str,
    ) -> Result<Reply, ArmError> {
        let url = format!("{}{path}?api-version={api_version}", self.base);
        let bytes = serde_json::to_vec(body)
            .map_err(|e| ArmError::new(CloudErrorKind::Invalid, format!("azure: {e}")))?;
        let reply = self.send(Method::Put, &url, path, Some(&bytes), if_match, endpoint)?;
        self.wait(&reply, path)?;
        Ok(reply)
    }

    /// Polls the operation `reply` started until it ends. Each poll is a request
    /// (counted, fenced); the interval is ARM's `Retry-After`, else the configured one.
    fn wait(&self, reply: &Reply, path: &str) -> Result<(), ArmError> {
        let (url, by_status) = match (&reply.async_operation, &reply.location) {
            (Some(url), _) => (url.clone(), false),
            (None, Some(url)) if reply.status == 202 => (url.clone(), true),
            _ => return self.settled(&reply.body, path),
        };
        if !self.same_origin(&url) {
            // The token is for Resource Manager alone.
            return Err(ArmError::new(
                CloudErrorKind::Ambiguous,
                format!(
                    "azure: PUT {path}: the operation is to be polled at {url}, outside \
                     {}; not sent there, so its outcome is unknown",
                    self.base
                ),
            ));
        }
        let deadline = Instant::now() + self.operation_timeout;
        let mut after = reply.retry_after;
        loop {
            let wait = after.unwrap_or(self.poll_interval).min(MAX_POLL_WAIT);
            if Instant::now() + wait > deadline {
                return Err(ArmError::new(
                    CloudErrorKind::Ambiguous,
                    format!(
                        "azure: PUT {path}: the operation did not end within {:?}; it may \
                         still succeed",
                        self.operation_timeout
                    ),
                ));
            }
            std::thread::sleep(wait);
            let poll = match self.send(Method::Get, &url, path, None, None, "operation") {
                Ok(p) => p,
                // The write was accepted; a failed poll says nothing of its outcome.
                Err(e) if e.kind == CloudErrorKind::Fenced => return Err(e),
                // A passing failure (no reply, a 5xx): poll again.
                Err(e) if matches!(e.kind, CloudErrorKind::Retry { .. }) => {
                    after = None;
                    continue;
                }
                // Throttled, or refused (a role without operations/read): the write's
                // outcome is unknown, and the next list tells.
                Err(e) => {
                    return Err(ArmError {
                        kind: CloudErrorKind::Ambiguous,
                        message: format!(
                            "{}; the write was accepted and its outcome is unknown",
                            e.message
                        ),
                        ..e
                    });
                }
            };
            after = poll.retry_after;
            if by_status {
                if poll.status == 202 {
                    continue;
                }
                return self.settled(&poll.body, path);
            }
            let status = poll
                .body
                .get("status")
                .and_then(|s| s.as_str())
                .unwrap_or("");
            match status {
                "Succeeded" => return Ok(()),
                "Failed" | "Canceled" | "Cancelled" => {
                    return Err(operation_failed(path, status, &poll.body));
                }
                _ => continue,
            }
        }
    }

    /// A reply with no operation to poll: done unless it says it failed.
    fn settled(&self, body: &serde_json::Value, path: &str) -> Result<(), ArmError> {
        match provisioning_state(body) {
            Some("Failed") | Some("Canceled") => Err(operation_failed(
                path,
                provisioning_state(body).unwrap_or(""),
                body,
            )),
            _ => Ok(()),
        }
    }

    fn same_origin(&self, url: &str) -> bool {
        url.strip_prefix(&self.base)
            .is_some_and(|rest| rest.starts_with('/'))
    }

    fn send(
        &self,
        method: Method,
        url: &str,
        path: &str,
        body: Option<&[u8]>,
        if_match: Option<&str>,
        endpoint: &'static str,
    ) -> Result<Reply, ArmError> {
        let what = format!("{} {path}", method.as_str());
        // Before anything leaves, a token request included: the lease may have been
        // lost, also between a write and the polls of its operation.
        self.fence
            .check()
            .map_err(|e| ArmError::new(e.kind, format!("azure: {what}: {}", e.message)))?;
        let token = self.tokens.token().map_err(ArmError::from)?;
        let auth = format!("Bearer {}", token.expose());
        Meter::request();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let sent = match method {
            Method::Get => self
                .agent
                .get(url)
                .header("Authorization", &auth)
                .header("Accept", "application/json")
                .call(),
            Method::Put => {
                let mut request = self
                    .agent
                    .put(url)
                    .header("Authorization", &auth)
                    .header("Accept", "application/json");
                if let Some(etag) = if_match {
                    request = request.header("If-Match", etag);
                }
                request
                    .content_type("application/json")
                    .send(body.unwrap_or(b"{}"))
            }
        };
        let others_in_flight = self.in_flight.fetch_sub(1, Ordering::SeqCst) - 1;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => {
                self.record(endpoint, None);
                return Err(transport_error(&e, method, &what));
            }
        };
        let status = response.status().as_u16();
        self.record(endpoint, Some(status));
        let headers = Headers::read(response.headers());
        if let Some(remaining) = headers.remaining {
            // Requests of ours still on their way may not be counted yet; assuming
            // they are not errs on the side of sending later.
            Meter::budget(None, remaining.saturating_sub(others_in_flight));
        }
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_vec()
            .map_err(|e| transport_error(&e, method, &what))?;
        if (200..300).contains(&status) {
            let body = if bytes.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_slice(&bytes).map_err(|e| {
                    let kind = transient(method);
                    ArmError::new(
                        kind,
                        format!(
                            "azure: {what}: the reply does not decode ({e}; HTTP {status}{}){}",
                            headers.ids(),
                            outcome_note(method, kind)
                        ),
                    )
                })?
            };
            return Ok(Reply {
                status,
                etag: headers.etag.or_else(|| {
                    body.get("etag")
                        .and_then(|e| e.as_str())
                        .map(str::to_string)
                }),
                async_operation: headers.async_operation,
                location: headers.location,
                retry_after: headers.retry_after,
                body,
            });
        }
        let error = api_error(method, &what, status, &bytes, &headers);
        if status == 401 {
            self.tokens.forget();
        }
        if let CloudErrorKind::RateLimited { after } = error.kind {
            Meter::throttled(after);
        } else if let (CloudErrorKind::Conflict, Some(after)) = (error.kind, headers.retry_after)
            && status == 409
        {
            // The table is busy with another writer's operation and ARM said when to
            // come back: nothing sent before then could succeed.
            Meter::throttled(after);
        }
        Err(error)
    }

    fn record(&self, endpoint: &'static str, status: Option<u16>) {
        if let Some(m) = &self.metrics {
            m.cloud_api_request("azure", endpoint, status);
        }
    }
}

fn provisioning_state(body: &serde_json::Value) -> Option<&str> {
    body.pointer("/properties/provisioningState")
        .and_then(|s| s.as_str())
}

/// An operation that ended without success: the change was not made.
fn operation_failed(path: &str, status: &str, body: &serde_json::Value) -> ArmError {
    let code = body
        .pointer("/error/code")
        .and_then(|c| c.as_str())
        .unwrap_or("");
    let message = body
        .pointer("/error/message")
        .and_then(|c| c.as_str())
        .unwrap_or("");
    ArmError {
        kind: classify(code, Method::Get, 0),
        status: None,
        code: Some(code.to_string()).filter(|c| !c.is_empty()),
        message: format!("azure: PUT {path}: the operation ended {status}: {message} ({code})"),
    }
}

/// The headers of one reply that matter here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Headers {
    pub etag: Option<String>,
    pub async_operation: Option<String>,
    pub location: Option<String>,
    pub retry_after: Option<Duration>,
    /// The smallest of ARM's `x-ms-ratelimit-remaining-*` counts in the reply.
    pub remaining: Option<u64>,
    pub request_id: Option<String>,
    pub correlation_id: Option<String>,
}

impl Headers {
    pub(super) fn read(headers: &ureq::http::HeaderMap) -> Headers {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        // ARM reports its buckets per scope and kind (subscription/tenant, reads,
        // writes, deletes, global); the controller's one bucket must fit the smallest.
        let remaining = headers
            .iter()
            .filter(|(name, _)| name.as_str().starts_with("x-ms-ratelimit-remaining-"))
            .filter_map(|(_, v)| v.to_str().ok()?.trim().parse::<u64>().ok())
            .min();
        Headers {
            etag: text("ETag"),
            async_operation: text("Azure-AsyncOperation"),
            location: text("Location"),
            retry_after: text("Retry-After")
                .and_then(|s| s.parse::<u64>().ok())
                .map(|s| Duration::from_secs(s.min(3600))),
            remaining,
            request_id: text("x-ms-request-id"),
            correlation_id: text("x-ms-correlation-request-id"),
        }
    }

    /// `, request ID …, correlation ID …` for messages.
    fn ids(&self) -> String {
        let mut s = String::new();
        if let Some(id) = &self.request_id {
            s.push_str(&format!(", request ID {id}"));
        }
        if let Some(id) = &self.correlation_id {
            s.push_str(&format!(", correlation ID {id}"));
        }
        s
    }
}

/// Builds the error of a non-2xx reply.
pub(super) fn api_error(
    method: Method,
    what: &str,
    status: u16,
    body: &[u8],
    headers: &Headers,
) -> ArmError {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let code = json
        .pointer("/error/code")
        .and_then(|c| c.as_str())
        .unwrap_or("")
        .to_string();
    let message = json
        .pointer("/error/message")
        .and_then(|c| c.as_str())
        .unwrap_or("")
        .to_string();
    let kind = match status {
        429 => CloudErrorKind::RateLimited {
            after: headers.retry_after.unwrap_or(DEFAULT_THROTTLE),
        },
        412 => CloudErrorKind::Conflict,
        401 if code == "ExpiredAuthenticationToken" || code == "InvalidAuthenticationToken" => {
            CloudErrorKind::Retry { after: None }
        }
        _ => match classify(&code, method, status) {
            CloudErrorKind::Retry { after: None } => CloudErrorKind::Retry {
                after: headers.retry_after,
            },
            kind => kind,
        },
    };
    let advice = advice(&code, status)
        .map(|a| format!("; {a}"))
        .unwrap_or_default();
    let shown_code = if code.is_empty() {
        "no error code".to_string()
    } else {
        code.clone()
    };
    ArmError {
        kind,
        status: Some(status),
        message: format!(
            "azure: {what}: {message} ({shown_code}, HTTP {status}{}){advice}{}",
            headers.ids(),
            outcome_note(method, kind)
        ),
        code: Some(code).filter(|c| !c.is_empty()),
    }
}

/// What an ARM error code (with its status) means for the controller.
pub(super) fn classify(code: &str, method: Method, status: u16) -> CloudErrorKind {
    match code {
        "AnotherOperationInProgress"
        | "RetryableErrorDueToAnotherOperation"
        | "ReferencedResourceNotProvisioned"
        | "PreconditionFailed"
        | "Conflict" => CloudErrorKind::Conflict,
        "TooManyRequests" | "SubscriptionRequestsThrottled" | "TenantRequestsThrottled" => {
            CloudErrorKind::RateLimited {
                after: DEFAULT_THROTTLE,
            }
        }
        // A route of the table breaks ARM's name rule: the whole PUT is refused, and
        // its message names the route.
        "InvalidResourceName" => CloudErrorKind::BatchRefused {
            reason: super::INVALID_ROUTE_NAME,
            at_fault: None,
        },
        c if is_route_limit(c) => CloudErrorKind::TableFull,
        "InternalServerError"
        | "ServiceUnavailable"
        | "GatewayTimeout"
        | "RetryableError"
        | "OperationTimedOut" => transient(method),
        _ if status == 409 => CloudErrorKind::Conflict,
        _ if (400..500).contains(&status) => CloudErrorKind::Invalid,
        // An operation that failed with a code we do not know (status 0): not made,
        // worth another try; a 5xx: unknown for a write.
        _ if status == 0 => CloudErrorKind::Retry { after: None },
        _ => transient(method),
    }
}

/// Codes of a route table that holds its limit. Azure's exact code is not documented
/// for route tables; these are the network provider's limit codes, matched loosely
/// [unverified against a live table].
fn is_route_limit(code: &str) -> bool {
    let c = code.to_ascii_lowercase();
    c.contains("route") && (c.contains("limit") || c.contains("quota"))
}

/// A failure that says nothing about whether the request took effect: harmless for
/// a GET, unknown for a PUT.
fn transient(method: Method) -> CloudErrorKind {
    match method {
        Method::Get => CloudErrorKind::Retry { after: None },
        Method::Put => CloudErrorKind::Ambiguous,
    }
}

/// What the operator should do about a code, where ARM's message alone does not say.
fn advice(code: &str, status: u16) -> Option<&'static str> {
    Some(match (code, status) {
        ("AuthorizationFailed", _) | (_, 403) => {
            "the identity lacks a role: give it Network Contributor on the route table (or \
             a role with Microsoft.Network/routeTables/read and write) and Reader on the \
             nodes' VMs and NICs (Microsoft.Compute/virtualMachines/read, \
             Microsoft.Network/networkInterfaces/read)"
        }
        ("InvalidAuthenticationTokenTenant", _) => {
            "the token is of another tenant: check tenantId against the subscription's tenant"
        }
        ("ResourceNotFound", _) | ("ResourceGroupNotFound", _) | ("NotFound", _) => {
            "check subscriptionId, routeTableResourceGroup (or resourceGroup) and \
             routeTableName in azure.json"
        }
        ("SubscriptionNotFound", _) => "check subscriptionId in azure.json",
        (c, _) if is_route_limit(c) => {
            "the route table holds its limit: raise routeTableRouteLimit only if Azure allows \
             more, or remove routes"
        }
        ("AnotherOperationInProgress" | "RetryableErrorDueToAnotherOperation", _) => {
            "another writer is changing the route table; retried after its operation"
        }
        (_, 429) => {
            "the subscription's ARM request budget is used up (also by other clients of the \
             subscription); waiting for it to refill"
        }
        _ => return None,
    })
}

fn outcome_note(method: Method, kind: CloudErrorKind) -> &'static str {
    match (method, kind) {
        (Method::Put, CloudErrorKind::Ambiguous) => "; the change may or may not have been made",
        _ => "",
    }
}

/// A request that got no usable reply. It certainly was not sent when the connection
/// could not be made; after that, a PUT may have reached ARM.
fn transport_error(e: &ureq::Error, method: Method, what: &str) -> ArmError {
    let kind = if crate::http::certainly_unsent(e) {
        CloudErrorKind::Retry { after: None }
    } else {
        transient(method)
    };
    ArmError::new(
        kind,
        format!(
            "azure: {what}: {}{}",
            crate::http::describe(e),
            outcome_note(method, kind)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(method: Method, status: u16, body: &str, retry_after: Option<u64>) -> ArmError {
        let headers = Headers {
            retry_after: retry_after.map(Duration::from_secs),
            request_id: Some("req-1".into()),
            ..Headers::default()
        };
        api_error(method, "PUT /rt", status, body.as_bytes(), &headers)
    }

    #[test]
    fn arm_errors_map_to_what_the_controller_does() {
        let e = error(
            Method::Get,
            429,
            r#"{"error":{"code":"SubscriptionRequestsThrottled","message":"slow down"}}"#,
            Some(17),
        );
        assert_eq!(
            e.kind,
            CloudErrorKind::RateLimited {
                after: Duration::from_secs(17)
            }
        );
        assert!(
            e.message.contains("req-1") && e.message.contains("budget"),
            "{}",
            e.message
        );
        let e = error(
            Method::Put,
            412,
            r#"{"error":{"code":"PreconditionFailed","message":"etag"}}"#,
            None,
        );
        assert!(e.is_precondition_failed());
        assert_eq!(e.kind, CloudErrorKind::Conflict);
        let busy = r#"{"error":{"code":"RetryableErrorDueToAnotherOperation","message":"retry in 11 seconds"}}"#;
        assert_eq!(
            error(Method::Put, 409, busy, Some(11)).kind,
            CloudErrorKind::Conflict
        );
        let e = error(
            Method::Get,
            403,
            r#"{"error":{"code":"AuthorizationFailed","message":"no routeTables/write"}}"#,
            None,
        );
        assert_eq!(e.kind, CloudErrorKind::Invalid);
        assert!(e.message.contains("Network Contributor"), "{}", e.message);
        assert_eq!(
            error(Method::Put, 500, "", None).kind,
            CloudErrorKind::Ambiguous
        );
        assert!(
            error(Method::Put, 500, "", None)
                .message
                .contains("may or may not")
        );
        assert_eq!(
            error(Method::Get, 503, "", Some(3)).kind,
            CloudErrorKind::Retry {
                after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(
            error(
                Method::Get,
                404,
                r#"{"error":{"code":"ResourceNotFound"}}"#,
                None
            )
            .kind,
            CloudErrorKind::Invalid
        );
        assert_eq!(
            error(
                Method::Put,
                400,
                r#"{"error":{"code":"RouteTableRouteLimitReached"}}"#,
                None
            )
            .kind,
            CloudErrorKind::TableFull
        );
        assert_eq!(
            error(
                Method::Put,
                401,
                r#"{"error":{"code":"ExpiredAuthenticationToken"}}"#,
                None
            )
            .kind,
            CloudErrorKind::Retry { after: None }
        );
        // A failed operation: not made, worth another try.
        assert_eq!(
            classify("SomethingNew", Method::Get, 0),
            CloudErrorKind::Retry { after: None }
        );
    }

    #[test]
    fn the_smallest_remaining_count_is_the_budget() {
        let mut map = ureq::http::HeaderMap::new();
        for (k, v) in [
            ("x-ms-ratelimit-remaining-subscription-reads", "249"),
            ("x-ms-ratelimit-remaining-subscription-global-reads", "3000"),
            ("x-ms-ratelimit-remaining-subscription-writes", "198"),
            ("Retry-After", "7"),
            ("ETag", "W/\"1\""),
        ] {
            map.insert(
                ureq::http::HeaderName::from_static(Box::leak(
                    k.to_ascii_lowercase().into_boxed_str(),
                )),
                ureq::http::HeaderValue::from_static(v),
            );
        }
        let h = Headers::read(&map);
        assert_eq!(h.remaining, Some(198));
        assert_eq!(h.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(h.etag.as_deref(), Some("W/\"1\""));
    }
}
