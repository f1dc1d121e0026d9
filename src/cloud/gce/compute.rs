//! The HTTP side of the GCE provider: one blocking client of the Compute API (v1,
//! JSON) that sends the bearer token, passes the lease fence before every request,
//! counts every request in the bucket of its rate-quota group for the controller's
//! budget ([`Meter::request_in`], [`ApiCall::quota_group`]) and turns failures into
//! [`ApiError`]s that say what the controller should do.
//!
//! Failures are classified by status and `error.errors[].reason`, as Google's clients
//! do: 403 carries both refusals of permission and the per-project rate quota
//! (`rateLimitExceeded`, `userRateLimitExceeded`) and the resource quota
//! (`quotaExceeded`). Whether a failed request may have taken effect decides between
//! "retry" and "ambiguous": a GET changes nothing; an insert or delete whose reply was
//! lost may have.
//!
//! This module never logs or formats a token; messages name the method and path.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::auth::TokenSource;
use super::config::QuotaGroup;
use crate::fence::Fence;
use crate::metrics::Metrics;
use crate::provider::{CloudError, CloudErrorKind, Meter};

/// The largest reply accepted (a page of 500 routes is a few hundred kilobytes).
const MAX_REPLY_BYTES: u64 = 32 << 20;

/// How long to send nothing after a rate-limit refusal without `Retry-After`: GCE's
/// rate quotas are counted per minute, so a refusal means the group's share of the
/// minute is spent; a few seconds lets other clients' load pass without stalling for
/// long. Only the refused request's group holds back.
pub(super) const THROTTLE_PAUSE: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Method {
    Get,
    Post,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

/// The Compute API methods this provider calls, each counted in one rate-quota group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ApiCall {
    RoutesList,
    RoutesInsert,
    RoutesDelete,
    OperationsWait,
    InstancesGet,
    ProjectsGet,
}

impl ApiCall {
    /// The method's name, as metrics and the double count it.
    pub(super) fn name(self) -> &'static str {
        match self {
            ApiCall::RoutesList => "routes.list",
            ApiCall::RoutesInsert => "routes.insert",
            ApiCall::RoutesDelete => "routes.delete",
            ApiCall::OperationsWait => "globalOperations.wait",
            ApiCall::InstancesGet => "instances.get",
            ApiCall::ProjectsGet => "projects.get",
        }
    }

    /// The quota group GCE counts it in, whose bucket it is recorded in.
    pub(super) fn quota_group(self) -> QuotaGroup {
        match self {
            ApiCall::RoutesInsert | ApiCall::RoutesDelete => QuotaGroup::Mutations,
            ApiCall::RoutesList => QuotaGroup::Lists,
            ApiCall::ProjectsGet => QuotaGroup::Reads,
            ApiCall::OperationsWait => QuotaGroup::OperationReads,
            ApiCall::InstancesGet => QuotaGroup::ZonalReads,
        }
    }
}

/// A failed request: what to do, the HTTP status and Google's reason if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ApiError {
    pub kind: CloudErrorKind,
    pub status: Option<u16>,
    pub reason: Option<String>,
    pub message: String,
}

impl ApiError {
    pub(super) fn new(kind: CloudErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            status: None,
            reason: None,
            message: message.into(),
        }
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

impl From<CloudError> for ApiError {
    fn from(e: CloudError) -> ApiError {
        ApiError::new(e.kind, e.message)
    }
}

// --- the API's JSON, the fields we use (unknown fields are ignored) ---------------

/// A route (`compute#route`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct RouteJson {
    pub name: String,
    pub dest_range: String,
    pub next_hop_instance: String,
    pub network: String,
    pub description: String,
    pub priority: u32,
    pub warnings: Vec<Warning>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub(super) struct Warning {
    pub code: String,
    pub message: String,
}

/// A page of `routes.list`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct RouteList {
    pub items: Vec<RouteJson>,
    pub next_page_token: Option<String>,
}

/// A global operation (`compute#operation`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct Operation {
    pub name: String,
    pub status: String,
    pub error: Option<OperationError>,
    pub http_error_status_code: Option<u16>,
    pub http_error_message: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct OperationError {
    pub errors: Vec<OperationErrorItem>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct OperationErrorItem {
    pub code: String,
    pub message: String,
}

impl Operation {
    pub(super) fn done(&self) -> bool {
        self.status == "DONE"
    }

    /// The first error code and every message, if the operation failed.
    pub(super) fn failure(&self) -> Option<(String, String)> {
        let errors = &self.error.as_ref()?.errors;
        let first = errors.first()?;
        let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        Some((first.code.clone(), messages.join("; ")))
    }
}

/// An instance (`compute#instance`), the fields a route needs.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct Instance {
    pub name: String,
    pub self_link: String,
    pub can_ip_forward: bool,
}

/// A project (`compute#project`), its quotas.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Project {
    pub quotas: Vec<Quota>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Quota {
    pub metric: String,
    pub limit: f64,
    pub usage: f64,
}

/// Google's error body.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorEnvelope {
    error: ErrorBody,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    code: u16,
    message: String,
    errors: Vec<ErrorItem>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorItem {
    reason: String,
}

// --- the client ---------------------------------------------------------------------

/// The blocking Compute API client, shared by the provider's threads.
pub(super) struct Compute {
    agent: ureq::Agent,
    /// Ends in `/compute/v1/`.
    base: String,
    tokens: TokenSource,
    metrics: Option<Arc<Metrics>>,
    fence: Fence,
    request_timeout: Duration,
}

impl fmt::Debug for Compute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compute")
            .field("base", &self.base)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl Compute {
    pub(super) fn new(
        base: &str,
        tokens: TokenSource,
        request_timeout: Duration,
        metrics: Option<Arc<Metrics>>,
        (trust, proxying): (&crate::Trust, &crate::Proxying),
    ) -> Compute {
        let agent: ureq::Agent = crate::http::agent_config(trust, proxying)
            .http_status_as_error(false)
            .timeout_global(Some(request_timeout))
            .timeout_connect(Some(request_timeout.min(Duration::from_secs(5))))
            .max_idle_age(Duration::from_secs(5))
            .user_agent(concat!("route-controller/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Compute {
            agent,
            base: base.to_string(),
            tokens,
            metrics,
            fence: Fence::open(),
            request_timeout,
        }
    }

    pub(super) fn set_fence(&mut self, fence: Fence) {
        fence.covers(self.request_timeout);
        self.fence = fence;
    }

    /// `GET {base}{path}?query`, decoded.
    pub(super) fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        call: ApiCall,
    ) -> Result<T, ApiError> {
        self.exchange(Method::Get, path, query, None, call)
    }

    /// `POST {base}{path}` with a JSON body (or none), decoded.
    pub(super) fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<&serde_json::Value>,
        call: ApiCall,
    ) -> Result<T, ApiError> {
        self.exchange(Method::Post, path, &[], body, call)
    }

    /// `DELETE {base}{path}`, decoded.
    pub(super) fn delete<T: DeserializeOwned>(
        &self,
        path: &str,
        call: ApiCall,
    ) -> Result<T, ApiError> {
        self.exchange(Method::Delete, path, &[], None, call)
    }

    fn exchange<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&serde_json::Value>,
        call: ApiCall,
    ) -> Result<T, ApiError> {
        let what = format!("{} {path}", method.as_str());
        let token = self
            .tokens
            .token()
            .map_err(|e| ApiError::new(e.kind, e.message))?;
        // Right before the request leaves: the lease may have been lost, also between
        // an insert and the waits for its operation.
        self.fence
            .check()
            .map_err(|e| ApiError::new(e.kind, format!("gce: {what}: {}", e.message)))?;
        let mut url = format!("{}{path}", self.base);
        if !query.is_empty() {
            url.push('?');
            let pairs: Vec<String> = query
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        percent_encoding::utf8_percent_encode(
                            v,
                            percent_encoding::NON_ALPHANUMERIC
                        )
                    )
                })
                .collect();
            url.push_str(&pairs.join("&"));
        }
        let auth = token.map(|t| format!("Bearer {}", t.expose()));
        // The controller spends the budget; this only reports what was sent, in the
        // bucket of the method's quota group.
        let bucket = call.quota_group().bucket();
        Meter::request_in(bucket);
        let sent = match method {
            Method::Get => with_auth(self.agent.get(&url), auth.as_deref()).call(),
            Method::Delete => with_auth(self.agent.delete(&url), auth.as_deref()).call(),
            Method::Post => {
                let bytes = body.map(|b| b.to_string()).unwrap_or_default();
                with_auth(self.agent.post(&url), auth.as_deref())
                    .content_type("application/json")
                    .send(bytes.as_bytes())
            }
        };
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => {
                self.record(call, None);
                return Err(transport_error(&e, method, &what));
            }
        };
        let status = response.status().as_u16();
        self.record(call, Some(status));
        let retry_after = response
            .headers()
            .get("Retry-After")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s.min(600)));
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_REPLY_BYTES)
            .read_to_vec()
            .map_err(|e| transport_error(&e, method, &what))?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes).map_err(|e| {
                let kind = match method {
                    Method::Get => CloudErrorKind::Retry { after: None },
                    _ => CloudErrorKind::Ambiguous,
                };
                ApiError::new(
                    kind,
                    format!(
                        "gce: {what}: HTTP {status} with a reply that is not the API's JSON ({e})"
                    ),
                )
            });
        }
        let error = api_error(method, &what, status, &bytes, retry_after);
        if status == 401 {
            // Revoked or expired early: the next request fetches a new one.
            self.tokens.invalidate();
        }
        if let CloudErrorKind::RateLimited { after } = error.kind {
            // GCE counts each group apart: a refused insert holds back the changes,
            // not the lists or the waits.
            Meter::throttled_in(bucket, after);
        }
        Err(error)
    }

    fn record(&self, call: ApiCall, status: Option<u16>) {
        if let Some(m) = &self.metrics {
            m.cloud_api_request("gce", call.name(), status);
        }
    }
}

fn with_auth<B>(request: ureq::RequestBuilder<B>, auth: Option<&str>) -> ureq::RequestBuilder<B> {
    let request = request.header("Accept", "application/json");
    match auth {
        Some(a) => request.header("Authorization", a),
        None => request,
    }
}

/// A request that got no reply. A connection refused or a name that does not resolve
/// never reached the API, so nothing changed; anything later may have.
fn transport_error(e: &ureq::Error, method: Method, what: &str) -> ApiError {
    let kind = if method == Method::Get || crate::http::certainly_unsent(e) {
        CloudErrorKind::Retry { after: None }
    } else {
        CloudErrorKind::Ambiguous
    };
    ApiError::new(
        kind,
        format!("gce: {what}: no reply ({})", crate::http::describe(e)),
    )
}

/// The error of a non-2xx reply, classified by status and Google's reason.
fn api_error(
    method: Method,
    what: &str,
    status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
) -> ApiError {
    let envelope: ErrorEnvelope = serde_json::from_slice(body).unwrap_or_default();
    let reason = envelope.error.errors.first().map(|e| e.reason.clone());
    let message = match envelope.error.message.as_str() {
        "" => String::from_utf8_lossy(body)
            .chars()
            .take(200)
            .collect::<String>(),
        m => m.to_string(),
    };
    let reason_text = reason.as_deref().unwrap_or("");
    let shown = if reason_text.is_empty() {
        format!("gce: {what}: HTTP {status}: {message}")
    } else {
        format!("gce: {what}: HTTP {status} {reason_text}: {message}")
    };
    let kind = match (status, reason_text) {
        (429, _) | (403, "rateLimitExceeded" | "userRateLimitExceeded") => {
            CloudErrorKind::RateLimited {
                after: retry_after.unwrap_or(THROTTLE_PAUSE),
            }
        }
        (403, "quotaExceeded") => CloudErrorKind::TableFull,
        (401, _) => CloudErrorKind::Invalid,
        (403, _) => CloudErrorKind::Invalid,
        (404, _) => CloudErrorKind::NotFound,
        (409, _) => CloudErrorKind::AlreadyExists,
        (412, _) => CloudErrorKind::Conflict,
        (400..=499, "resourceNotReady") => CloudErrorKind::Conflict,
        (400..=499, _) => CloudErrorKind::Invalid,
        (_, _) if method == Method::Get => CloudErrorKind::Retry { after: retry_after },
        (_, _) => CloudErrorKind::Ambiguous,
    };
    let hint = match (status, reason_text) {
        (401, _) => "; the credentials were refused: check the service account and its key",
        (403, r)
            if !matches!(
                r,
                "rateLimitExceeded" | "userRateLimitExceeded" | "quotaExceeded"
            ) =>
        {
            "; grant the service account the permissions the README's GCE section lists"
        }
        _ => "",
    };
    ApiError {
        kind,
        status: Some(status),
        reason,
        message: format!("{shown}{hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(method: Method, status: u16, reason: &str) -> ApiError {
        let body = serde_json::json!({"error": {"code": status, "message": "m",
            "errors": [{"reason": reason, "message": "m"}]}});
        api_error(method, "GET /x", status, body.to_string().as_bytes(), None)
    }

    #[test]
    fn refusals_map_by_status_and_reason() {
        assert_eq!(
            error(Method::Post, 403, "rateLimitExceeded").kind,
            CloudErrorKind::RateLimited {
                after: THROTTLE_PAUSE
            }
        );
        assert_eq!(
            error(Method::Get, 429, "").kind,
            CloudErrorKind::RateLimited {
                after: THROTTLE_PAUSE
            }
        );
        assert_eq!(
            error(Method::Post, 403, "quotaExceeded").kind,
            CloudErrorKind::TableFull
        );
        let forbidden = error(Method::Get, 403, "forbidden");
        assert_eq!(forbidden.kind, CloudErrorKind::Invalid);
        assert!(
            forbidden.message.contains("permissions"),
            "{}",
            forbidden.message
        );
        assert_eq!(
            error(Method::Delete, 404, "notFound").kind,
            CloudErrorKind::NotFound
        );
        assert_eq!(
            error(Method::Post, 409, "alreadyExists").kind,
            CloudErrorKind::AlreadyExists
        );
        assert_eq!(
            error(Method::Post, 503, "backendError").kind,
            CloudErrorKind::Ambiguous
        );
        assert_eq!(
            error(Method::Get, 503, "backendError").kind,
            CloudErrorKind::Retry { after: None }
        );
        let bare = api_error(
            Method::Get,
            "GET /x",
            429,
            b"",
            Some(Duration::from_secs(7)),
        );
        assert_eq!(
            bare.kind,
            CloudErrorKind::RateLimited {
                after: Duration::from_secs(7)
            }
        );
    }
}
